"""The network running out, against the real control plane (Debian 12's nova and neutron,
Zed): what Nova and Neutron really raise is read as CAPACITY or QUOTA, never OTHER.

- A subnet with no free address: the burst network's allocation pool is cut to one address
  an admin's port holds. Nova accepts the server; its build fails in the compute service
  (Neutron's IpAddressGenerationFailure -> NoMoreFixedIps -> BuildAbortException, fault 500
  "... Failed to allocate the network(s) with error No fixed IP addresses available for
  network ..."): CAPACITY, so every flavor is tried and then the fallback template.
- A port quota of 1: the first node takes the one port; Nova refuses the second at the API
  (validate_networks finds no port left: 403 PortLimitExceeded "Maximum number of ports
  exceeded"): QUOTA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind
from tests.realnova.harness import RealNovaHarness, contract_harness
from tests.services.openstack import controlplane
from tests.services.openstack.controlplane import ControlPlane


@pytest.fixture
def harness(plane: ControlPlane, tmp_path: Path) -> Iterator[RealNovaHarness]:
    with contract_harness(plane, tmp_path) as made:
        yield made


@pytest.fixture
def subnet_full(harness: RealNovaHarness) -> Iterator[None]:
    """The burst network's subnet with its one free address taken by an admin's port."""
    admin = harness.plane.admin()
    network = admin.network.find_network(controlplane.NETWORK, ignore_missing=False)
    subnet = admin.network.find_subnet(f"{controlplane.NETWORK}-v4", ignore_missing=False)
    pools = list(subnet.allocation_pools)
    admin.network.update_subnet(
        subnet, allocation_pools=[{"start": "10.31.0.250", "end": "10.31.0.250"}]
    )
    port = admin.network.create_port(network_id=network.id, name="takes-the-last-address")
    try:
        yield
    finally:
        admin.network.delete_port(port, ignore_missing=True)
        admin.network.update_subnet(subnet, allocation_pools=pools)


@pytest.fixture
def one_port(harness: RealNovaHarness) -> Iterator[None]:
    admin = harness.plane.admin()
    project = admin.identity.find_project(controlplane.BURST_PROJECT, ignore_missing=False)
    admin.network.update_quota(project.id, port=1)
    try:
        yield
    finally:
        harness.clean()  # the servers first: their ports count against the quota
        admin.network.delete_quota(project.id)


@pytest.mark.usefixtures("subnet_full")
def test_a_subnet_with_no_free_address_is_capacity(harness: RealNovaHarness) -> None:
    spec = harness.spec(["n-001"], instance_types=["g1.small", "g1.tiny"])
    result = harness.provider().launch(spec, 1, "req-no-address")
    assert result.instances == [] and result.errors
    assert {e.kind for e in result.errors} == {ErrorKind.CAPACITY}, result.errors
    assert "No fixed IP addresses available for network" in result.errors[0].message
    assert {e.instance_type for e in result.errors} == {"g1.small", "g1.tiny"}


@pytest.mark.usefixtures("one_port")
def test_a_port_quota_of_one_starts_one_node_and_refuses_the_next_as_quota(
    harness: RealNovaHarness,
) -> None:
    provider = harness.provider()
    first = provider.launch(harness.spec(["n-001"]), 1, "req-port-1")
    assert first.ok, first.errors
    second = provider.launch(harness.spec(["n-002"]), 1, "req-port-2")
    assert second.instances == []
    assert [e.kind for e in second.errors] == [ErrorKind.QUOTA], second.errors
    assert "Maximum number of ports exceeded" in second.errors[0].message

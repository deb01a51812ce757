"""Network exhaustion through the real openstacksdk against FakeOpenStack, read by what Nova
and Neutron raise (nova_neutron_codes.py): a subnet with no free address is CAPACITY, a port
quota is QUOTA, never OTHER or INVALID; a build fault of another kind still stops the flavor
walk."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind
from tests.fakes.openstack_fake import FakeOpenStack
from tests.fakes.openstack_harness import OpenStackHarness, contract_harness

pytestmark = pytest.mark.integration


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[OpenStackHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def creates(fake: FakeOpenStack) -> int:
    return len(fake.requests("POST", "/compute/v2.1/servers"))


def test_a_subnet_with_no_free_address_is_capacity(harness: OpenStackHarness) -> None:
    harness.fake.set_network_limits(free_addresses=0)
    spec = harness.spec(["n-001"])
    result = harness.os_provider().launch(spec, 1, "req-no-address")
    assert result.instances == [] and result.errors
    assert {e.kind for e in result.errors} == {ErrorKind.CAPACITY}
    assert "No fixed IP addresses available for network" in result.errors[0].message
    # capacity: every flavor of the template was tried (the fallback template comes next)
    assert creates(harness.fake) == len(spec.instance_types)
    assert harness.fake.servers() == []


def test_the_last_free_address_goes_to_one_node_the_other_is_capacity(
    harness: OpenStackHarness,
) -> None:
    harness.fake.set_network_limits(free_addresses=1)
    result = harness.os_provider().launch(harness.spec(["n-001", "n-002"]), 2, "req-one-address")
    assert len(result.instances) == 1 and result.missing == 1
    assert {e.kind for e in result.errors} == {ErrorKind.CAPACITY}


def test_a_port_quota_refusal_is_quota(harness: OpenStackHarness) -> None:
    harness.fake.set_network_limits(port_quota=0)
    result = harness.os_provider().launch(harness.spec(["n-001"]), 1, "req-port-quota")
    [error] = result.errors
    assert (error.kind, error.code) == (ErrorKind.QUOTA, "HTTP403")
    assert "Maximum number of ports exceeded" in error.message
    assert creates(harness.fake) == 1


def test_a_port_quota_of_one_takes_one_node_the_next_is_quota(harness: OpenStackHarness) -> None:
    harness.fake.set_network_limits(port_quota=1)
    provider = harness.os_provider()
    first = provider.launch(harness.spec(["n-001"]), 1, "req-port-1")
    assert first.ok, first.errors
    second = provider.launch(harness.spec(["n-002"]), 1, "req-port-2")
    assert [e.kind for e in second.errors] == [ErrorKind.QUOTA]


def test_neutron_refusing_an_sriov_port_is_read_by_its_exception_type(
    harness: OpenStackHarness,
) -> None:
    provider = harness.os_provider()
    spec = replace(harness.spec(["sr-1"]), fabric="sriov")
    harness.fake.set_network_limits(free_addresses=0)
    no_address = provider.launch(spec, 1, "req-sriov-address")
    assert {(e.kind, e.code) for e in no_address.errors} == {
        (ErrorKind.CAPACITY, "IpAddressGenerationFailure")
    }
    harness.fake.set_network_limits(port_quota=0)
    over = provider.launch(spec, 1, "req-sriov-quota")
    assert {(e.kind, e.code) for e in over.errors} == {(ErrorKind.QUOTA, "OverQuota")}
    assert harness.fake.port_list() == []

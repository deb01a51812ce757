"""`vnic_type = "direct"` on an OpenStack template, through openstacksdk against the
Keystone + Nova + Neutron fake: each server boots on a port of its own made on the
template's network with binding:vnic_type direct, and the port is deleted with it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind
from tests.fakes.openstack_fake import DEFAULT_NETWORKS
from tests.fakes.openstack_harness import OpenStackHarness, contract_harness

pytestmark = pytest.mark.integration

NET_ID = DEFAULT_NETWORKS["burst-net"]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[OpenStackHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def test_each_server_boots_on_its_own_direct_port_deleted_with_it(
    harness: OpenStackHarness,
) -> None:
    provider = harness.os_provider()
    spec = replace(harness.spec(["sr-1", "sr-2"]), fabric="sriov")
    result = provider.launch(spec, 2, "req-sriov")
    assert result.ok, result.errors
    ports = harness.fake.port_list()
    assert len(ports) == 2
    assert {p["binding:vnic_type"] for p in ports} == {"direct"}
    assert {p["network_id"] for p in ports} == {NET_ID}
    servers = {s["id"]: s for s in harness.fake.servers()}
    assert {p["device_id"] for p in ports} == set(servers)
    for port in ports:  # each server's port is named as the server, and its metadata says so
        server = servers[port["device_id"]]
        assert port["name"] == server["name"]
        assert server["metadata"]["cm-sriov-port"] == port["id"]
    provider.terminate([i.instance_id for i in result.instances], "req-sriov-stop")
    assert harness.fake.servers() == [] and harness.fake.port_list() == []


def test_a_plain_template_makes_no_port(harness: OpenStackHarness) -> None:
    provider = harness.os_provider()
    result = provider.launch(harness.spec(["n-1"]), 1, "req-plain")
    assert result.ok, result.errors
    assert harness.fake.port_list() == []
    provider.terminate([result.instances[0].instance_id], "req-plain-stop")
    assert harness.fake.servers() == []


def test_a_retry_after_a_failed_server_reuses_its_port(harness: OpenStackHarness) -> None:
    harness.fail_next_launches(ErrorKind.CAPACITY)  # the first server goes to ERROR
    provider = harness.os_provider()
    spec = replace(harness.spec(["sr-1"]), fabric="sriov")
    result = provider.launch(spec, 1, "req-sriov-retry")
    assert result.ok, result.errors
    (port,) = harness.fake.port_list()  # the failed server's port, booted on again
    (server,) = harness.fake.servers()
    assert port["device_id"] == server["id"] and port["binding:vnic_type"] == "direct"

"""All or nothing per job (issue 24 item 1) through each cloud's real SDK against its fake:
a job's nodes start together on one type or not at all, and nothing is left running."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import ALL_OR_NOTHING, InstanceState, LaunchSpec
from tests.fakes.harness import ContractHarness

pytestmark = pytest.mark.integration

CLOUDS = ["aws", "azure", "openstack"]


@pytest.fixture(params=CLOUDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ContractHarness]:
    module = importlib.import_module(f"tests.fakes.{request.param}_harness")
    with module.contract_harness(tmp_path) as made:
        yield made


def whole(harness: ContractHarness, names: list[str]) -> LaunchSpec:
    return replace(harness.spec(names), all_or_nothing=True)


def running(harness: ContractHarness) -> dict[str, str]:
    """Live instances: id -> instance type."""
    return {
        iid: inst.instance_type
        for iid, inst in harness.provider().list_instances().items()
        if inst.state is not InstanceState.TERMINATED
    }


def test_a_job_short_of_capacity_on_the_first_type_starts_whole_on_the_second(
    harness: ContractHarness,
) -> None:
    first, second = harness.spec([]).instance_types[:2]
    harness.limit_capacity(3, first)
    names = [f"n-{i}" for i in range(1, 5)]
    result = harness.provider().launch(whole(harness, names), 4, "req-whole-1")
    assert result.ok, result.errors
    assert sorted(i.node_name or "" for i in result.instances) == names
    assert {i.instance_type for i in result.instances} == {second}
    assert sorted(running(harness).values()) == [second] * 4  # nothing of `first` left


def test_two_jobs_of_four_against_capacity_for_six_start_exactly_one_job(
    harness: ContractHarness,
) -> None:
    harness.limit_capacity(6)
    provider = harness.provider()
    one = provider.launch(whole(harness, ["a-1", "a-2", "a-3", "a-4"]), 4, "req-job-1")
    two = provider.launch(whole(harness, ["b-1", "b-2", "b-3", "b-4"]), 4, "req-job-2")
    assert one.ok, one.errors
    assert two.instances == [] and two.missing == 4
    reason = two.errors[0]
    assert (reason.kind, reason.code) == (ErrorKind.CAPACITY, ALL_OR_NOTHING)
    # AWS starts none (MinTargetCapacity); Azure and OpenStack start 2 and release them
    assert re.search(r"all-or-nothing: got [02] of 4\b", reason.reason()), reason
    assert len(running(harness)) == 4


def creates(fake: Any) -> int:
    """POST /servers calls the OpenStack fake answered."""
    posts = fake.requests("POST", "/compute/v2.1/servers")
    return len([p for _, p in posts if p.rstrip("/").endswith("/servers")])


def test_openstack_tries_each_flavor_with_one_multi_create(tmp_path: Path) -> None:
    """Nova's multi-create: one POST /servers per flavor (min_count = max_count = 4); the
    short one is NoValidHost for all four (Nova schedules the request whole) and is deleted;
    the servers of the second are named and tagged for their nodes."""
    from tests.fakes.openstack_harness import contract_harness

    with contract_harness(tmp_path) as os_harness:
        first, second = os_harness.spec([]).instance_types[:2]
        os_harness.limit_capacity(3, first)
        names = [f"n-{i}" for i in range(1, 5)]
        result = os_harness.provider().launch(whole(os_harness, names), 4, "req-multi-1")
        assert result.ok, result.errors
        assert creates(os_harness.fake) == 2
        servers = os_harness.fake.servers()
        assert sorted(s["name"] for s in servers) == [f"contract-{n}" for n in names]
        assert {s["flavor"]["name"] for s in servers} == {second}
        assert sorted(s["metadata"]["clustermgr-node"] for s in servers) == names
        assert len({s["reservation_id"] for s in servers}) == 1  # one request made them all
        error = result.errors[0]
        assert len(result.errors) == 1, result.errors  # one request failed: one error
        assert (error.kind, error.instance_type, error.count) == (ErrorKind.CAPACITY, first, 4)
        assert "No valid host" in error.message


def test_openstack_retry_binds_what_a_crashed_try_made_and_deletes_the_rest(
    tmp_path: Path,
) -> None:
    """A daemon that died after its multi-create left five unbound servers of the request
    (tagged with it, no node yet): the retry of that request binds four to its nodes, deletes
    the fifth and creates nothing."""
    import openstack

    from clustermgr.providers.base import ours
    from clustermgr.providers.openstack.multicreate import request_name
    from tests.fakes.openstack_harness import GOOD_CLOUD, contract_harness

    with contract_harness(tmp_path) as os_harness:
        fake, spec = os_harness.fake, whole(os_harness, [f"n-{i}" for i in range(1, 5)])
        compute = openstack.connect(cloud=GOOD_CLOUD).compute
        compute.create_server(
            name=request_name("contract", "req-crash-1"),
            flavor_id=fake.flavors[2]["id"],  # g1.a100x8, the spec's first
            image_id=fake.images["ubuntu-24.04"],
            networks="auto",
            metadata=ours("contract", spec.template, "req-crash-1", {}),
            min_count=5,
            max_count=5,
        )
        before = creates(fake)
        result = os_harness.provider().launch(spec, 4, "req-crash-1")
        assert result.ok, result.errors
        assert creates(fake) == before  # nothing created
        servers = fake.servers()
        assert sorted(s["name"] for s in servers) == [f"contract-n-{i}" for i in range(1, 5)]
        assert sorted(s["metadata"]["clustermgr-node"] for s in servers) == list(spec.node_names)

"""All or nothing by Nova's multi-create against the real control plane (Debian 12's nova,
SmallFakeDriver's host holds four g1.small): a 3-node job is ONE `POST /servers` with
min_count = max_count = 3 (its servers share one reservation id, which an admin sees), each
renamed and tagged for its node; against room for two, Nova's scheduler fails the whole
request (NoValidHost for all three) and the launch leaves no server behind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import ALL_OR_NOTHING, TAG_NODE
from tests.realnova.harness import GONE_TIMEOUT_S, RealNovaHarness, contract_harness
from tests.services.openstack import controlplane
from tests.services.openstack.controlplane import ControlPlane

NODES = ["n-001", "n-002", "n-003"]


@pytest.fixture
def harness(plane: ControlPlane, tmp_path: Path) -> Iterator[RealNovaHarness]:
    with contract_harness(plane, tmp_path) as made:
        yield made


def burst_servers(harness: RealNovaHarness) -> list[Any]:
    """The burst project's servers as an admin sees them (with the reservation id)."""
    admin = harness.plane.admin()
    project = admin.identity.find_project(controlplane.BURST_PROJECT)
    return list(admin.compute.servers(all_projects=True, project_id=project.id))


def test_a_three_node_job_is_one_multi_create_bound_to_its_nodes(
    harness: RealNovaHarness,
) -> None:
    """g1.quad fits no host: NoValidHost for the whole first request, one error for it;
    g1.small: all three in one request, each named and tagged for its node."""
    spec = replace(harness.spec(NODES, instance_types=["g1.quad", "g1.small"]), all_or_nothing=True)
    result = harness.provider().launch(spec, len(NODES), "req-multi-1")
    assert result.ok, result.errors
    assert sorted(i.node_name or "" for i in result.instances) == NODES
    assert {i.instance_type for i in result.instances} == {"g1.small"}
    assert [(e.kind, e.instance_type, e.count) for e in result.errors] == [
        (ErrorKind.CAPACITY, "g1.quad", 3)
    ]
    assert "No valid host" in result.errors[0].message
    live = [s for s in burst_servers(harness) if s.status == "ACTIVE"]
    assert sorted(s.name for s in live) == [f"contract-{n}" for n in NODES]
    assert sorted(s.metadata[TAG_NODE] for s in live) == NODES
    reservations = {s.reservation_id for s in live}
    assert len(reservations) == 1 and None not in reservations  # one request made all three


def test_too_little_capacity_for_the_job_leaves_no_server(harness: RealNovaHarness) -> None:
    harness.limit_capacity(2)
    spec = replace(harness.spec(NODES), all_or_nothing=True)
    result = harness.provider().launch(spec, len(NODES), "req-multi-2")
    assert result.instances == [] and result.missing == 3
    reason = result.errors[0]
    assert (reason.kind, reason.code) == (ErrorKind.CAPACITY, ALL_OR_NOTHING)
    assert "got 0 of 3" in reason.message
    assert "No valid host" in result.errors[1].message
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while burst_servers(harness):  # deleted at once; Nova takes a moment to finish
        assert time.monotonic() < deadline, [s.name for s in burst_servers(harness)]
        time.sleep(0.5)

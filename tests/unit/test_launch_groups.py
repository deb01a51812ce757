"""Per-launch placement groups: their names, and which ones a cycle deletes (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from clustermgr.db.ownership import Issued
from clustermgr.nodes.states import NodeState
from clustermgr.providers.base import TAG_REQUEST, CloudInstance, InstanceState
from clustermgr.providers.launch_groups import (
    PlacementGroup,
    group_name,
    group_names,
    request_of_name,
)
from clustermgr.scaling.observe import NodeRecord
from clustermgr.scaling.spent_groups import spent_groups

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)
REQUEST = "r-0123456789abcdef"


def test_a_name_carries_cluster_template_and_request_and_a_long_one_keeps_the_request() -> None:
    assert group_name("hpc1", "a100", REQUEST) == f"cm-pg-hpc1-a100-{REQUEST}"
    long = group_name("hpc1", "t" * 100, REQUEST, 80)
    assert len(long) <= 80 and long.endswith(f"-{REQUEST}") and long.startswith("cm-pg-")
    assert long == group_name("hpc1", "t" * 100, REQUEST, 80)  # the same on every retry
    assert request_of_name(long) == REQUEST == request_of_name(group_name("c", "t", REQUEST))
    assert request_of_name("hpc-block") is None
    assert request_of_name("cm-pg-hpc1-a100-r-nothex") is None
    assert long in group_names("hpc1", "t" * 100, REQUEST)


def group(request: str = REQUEST, template: str = "a100") -> PlacementGroup:
    name = group_name("hpc1", template, request)
    return PlacementGroup(name, name, request, template)


def instance(request: str, state: InstanceState = InstanceState.RUNNING) -> CloudInstance:
    return CloudInstance(
        "i-1", "n1", state, None, "p4d.24xlarge", None, "on-demand", None, {TAG_REQUEST: request}
    )


def node(request: str | None) -> NodeRecord:
    return NodeRecord("n1", "cloud", NodeState.UP, "a100", "aws", request_id=request)


def spent(
    instances: dict[str, dict[str, CloudInstance]] | None = None,
    nodes: dict[str, NodeRecord] | None = None,
    issued_at: datetime = NOW - timedelta(hours=1),
    owner: str = "a100",
    found: PlacementGroup | None = None,
) -> list[str]:
    result = spent_groups(
        "hpc1",
        {"aws": [found or group()]},
        {"aws": {}} if instances is None else instances,
        nodes or {},
        {REQUEST: Issued(issued_at, owner)},
        NOW,
        300.0,
    )
    return [g.name for g in result.get("aws", [])]


def test_a_group_nothing_holds_is_spent() -> None:
    assert spent() == [group().name]


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("its provider was not listed this cycle", {"instances": {}}),
        ("a node row holds its request", {"nodes": {"n1": node(REQUEST)}}),
        ("a live instance carries its request", {"instances": {"aws": {"i-1": instance(REQUEST)}}}),
        (
            "its request is younger than the grace period",
            {"issued_at": NOW - timedelta(seconds=10)},
        ),
        ("its request was issued for another template", {"owner": "h100"}),
        (
            "it has another name than cm-scale gives",
            {"found": PlacementGroup("site", "site", REQUEST)},
        ),
    ],
)
def test_a_group_is_kept_when(why: str, kwargs: dict[str, object]) -> None:
    assert spent(**kwargs) == [], why  # type: ignore[arg-type]


def test_a_terminated_instance_or_another_requests_node_holds_nothing() -> None:
    gone = {"aws": {"i-1": instance(REQUEST, InstanceState.TERMINATED)}}
    assert spent(instances=gone, nodes={"n1": node("r-ffffffffffffffff")}) == [group().name]

"""The crash campaign's check finds each thing it counts (so its zeros mean something), and
nothing in a cloud and a database that agree."""

from __future__ import annotations

from datetime import UTC, datetime

from clustermgr.providers.base import TAG_NODE, TAG_REQUEST, CloudInstance, InstanceState
from tests.labs.chaoscheck import NodeRow, counts, history_breaks, inspect

UP_HISTORY = (("NEW", "POWERED_DOWN"), ("POWERED_DOWN", "LAUNCHING"), ("LAUNCHING", "BOOTING"))
DOWN_HISTORY = (*UP_HISTORY, ("BOOTING", "STOPPING"), ("STOPPING", "POWERED_DOWN"))


def instance(
    iid: str,
    node: str | None,
    state: InstanceState = InstanceState.RUNNING,
    request: str | None = None,
) -> CloudInstance:
    return CloudInstance(
        instance_id=iid,
        node_name=node,
        state=state,
        private_address=f"10.0.0.{len(iid)}",
        instance_type="t",
        zone=None,
        lifecycle="on-demand",
        launch_time=datetime(2026, 11, 23, tzinfo=UTC),
        tags={**({TAG_NODE: node} if node else {}), **({TAG_REQUEST: request} if request else {})},
    )


def booting(name: str, iid: str) -> NodeRow:
    return NodeRow(name, "BOOTING", iid, f"10.0.0.{len(iid)}", UP_HISTORY)


def resting(name: str) -> NodeRow:
    return NodeRow(name, "POWERED_DOWN", None, None, DOWN_HISTORY)


def test_a_cloud_and_database_that_agree_have_no_findings() -> None:
    instances = {
        "i-1": instance("i-1", "n1"),
        "i-9": instance("i-9", "n3", InstanceState.TERMINATED),
    }
    rows = {"n1": booting("n1", "i-1"), "n2": resting("n2"), "n3": resting("n3")}
    assert inspect(instances, rows, {"n1": "10.0.0.3"}) == []


def test_each_kind_of_finding_is_found() -> None:
    instances = {
        "i-1": instance("i-1", "n1"),
        "i-2": instance("i-2", "n1"),  # a second instance for n1: duplicate
        "i-3": instance("i-3", None),  # nobody's, never named: orphan
        "i-4": instance("i-4", "n2", InstanceState.STOPPING),  # n2 forgot it: orphan and lost
    }
    rows = {
        "n1": booting("n1", "i-1"),
        "n2": resting("n2"),
        "n3": booting("n3", "i-7"),  # holds an instance the cloud does not have: lost
        "n4": NodeRow("n4", "BOOTING", "i-1", "10.0.0.3", UP_HISTORY),  # i-1 held twice
    }
    # an all-or-nothing request of 4 with 2 instances live (bound, so nothing else): partial
    instances |= {f"i-{n}": instance(f"i-{n}", f"n{n}", request="r-9") for n in (5, 6)}
    rows |= {f"n{n}": booting(f"n{n}", f"i-{n}") for n in (5, 6)}
    told = {"n1": "10.0.0.3", "n4": "10.0.0.3", "n5": "10.0.0.3", "n6": "10.0.0.3"}
    whole = {"r-9": 4, "r-8": 2}  # r-8: none of its set live, as wanted
    found = inspect(instances, rows, told, ["lc-0000dead"], whole)
    lines = sorted(f.line() for f in found)
    assert counts(found) == {"duplicate": 2, "orphan": 4, "lost": 2, "partial": 1}, lines
    assert "partial: r-9: 2 of 4 instances live" in lines
    assert "orphan: lc-0000dead: namespace no running record names" in lines
    assert "lost: n2: POWERED_DOWN, forgot i-4" in lines
    assert "lost: n3: holds i-7, the cloud has none" in lines


def test_a_working_node_slurm_cannot_reach_is_lost() -> None:
    rows = {"n1": booting("n1", "i-1")}
    (found,) = inspect({"i-1": instance("i-1", "n1")}, rows, {"n1": "n1"})
    assert found.line() == "lost: n1: at 10.0.0.3, Slurm has NodeAddr=n1"


def test_a_history_must_chain_follow_the_rules_and_end_in_the_row() -> None:
    assert history_breaks(resting("n1")) is None
    gap = NodeRow("n1", "POWERED_DOWN", None, None, (("NEW", "POWERED_DOWN"), ("BOOTING", "UP")))
    assert "starts from BOOTING after one that ended in POWERED_DOWN" in str(history_breaks(gap))
    illegal = NodeRow(
        "n1", "BOOTING", None, None, (("NEW", "POWERED_DOWN"), ("POWERED_DOWN", "BOOTING"))
    )
    assert "POWERED_DOWN -> BOOTING is not an allowed transition" in str(history_breaks(illegal))
    behind = NodeRow("n1", "STOPPING", None, None, UP_HISTORY)
    assert history_breaks(behind) == "the last event ends in BOOTING, the node is STOPPING"
    assert history_breaks(NodeRow("n1", "POWERED_DOWN", None, None, ())) == "no events at all"

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from clustermgr.core.errors import IllegalTransitionError
from clustermgr.db.models import Node
from clustermgr.nodes.states import ALLOWED, NodeState, can_transition, transition


def make_node(state: NodeState = NodeState.POWERED_DOWN) -> Node:
    return Node(name="n1", kind="cloud", state=state.value, version=1)


def test_every_state_has_a_row_and_no_self_loops() -> None:
    assert set(ALLOWED) == set(NodeState)
    for state, targets in ALLOWED.items():
        assert state not in targets


def test_transition_records_an_event() -> None:
    node = make_node()
    at = datetime(2026, 1, 1, tzinfo=UTC)
    transition(node, NodeState.LAUNCHING, "queue_depth: 2 jobs", "engine", now=at)
    assert node.state == "LAUNCHING" and node.state_since == at
    [event] = node.events
    assert (event.old_state, event.new_state, event.reason, event.actor) == (
        "POWERED_DOWN",
        "LAUNCHING",
        "queue_depth: 2 jobs",
        "engine",
    )


def test_illegal_transition_raises_typed_error_and_changes_nothing() -> None:
    node = make_node()
    with pytest.raises(IllegalTransitionError, match="n1: POWERED_DOWN -> BOOTING"):
        transition(node, NodeState.BOOTING, "x", "test")
    assert node.state == "POWERED_DOWN" and node.events == []


def test_same_state_is_a_no_op() -> None:
    node = make_node(NodeState.UP)
    transition(node, NodeState.UP, "again", "test")
    assert node.events == []


def test_full_cloud_cycle_is_allowed() -> None:
    cycle = ["POWERED_DOWN", "REQUESTED", "LAUNCHING", "BOOTING", "UP", "DRAINING", "STOPPING"]
    for old, new in zip(cycle, [*cycle[1:], "POWERED_DOWN"], strict=True):
        assert can_transition(NodeState(old), NodeState(new))

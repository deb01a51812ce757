"""The node state machine: every allowed transition is listed here, in one place.

A cloud node slot cycles POWERED_DOWN -> REQUESTED -> LAUNCHING -> BOOTING -> UP ->
(DRAINING) -> STOPPING -> POWERED_DOWN; anything it cannot fix goes through FAILED.
On-prem nodes are UP or DOWN (and POWERED_DOWN once on-prem power control arrives).
A slot that leaves its template's hostlist is RETIRED, never deleted.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, object_session

from clustermgr.core.errors import IllegalTransitionError

if TYPE_CHECKING:
    from clustermgr.db.models import Node

Move = tuple["Node", str, Mapping[str, object]]  # a node, the reason, other columns to set


class NodeState(enum.StrEnum):
    POWERED_DOWN = "POWERED_DOWN"
    REQUESTED = "REQUESTED"
    LAUNCHING = "LAUNCHING"
    BOOTING = "BOOTING"
    UP = "UP"
    DRAINING = "DRAINING"
    STOPPING = "STOPPING"
    FAILED = "FAILED"
    DOWN = "DOWN"
    RETIRED = "RETIRED"


S = NodeState
ALLOWED: dict[NodeState, frozenset[NodeState]] = {
    S.POWERED_DOWN: frozenset({S.REQUESTED, S.LAUNCHING, S.UP, S.DOWN, S.RETIRED}),
    S.REQUESTED: frozenset({S.LAUNCHING, S.POWERED_DOWN, S.FAILED}),
    S.LAUNCHING: frozenset({S.BOOTING, S.UP, S.FAILED, S.STOPPING}),
    S.BOOTING: frozenset({S.UP, S.FAILED, S.STOPPING}),
    S.UP: frozenset({S.DRAINING, S.STOPPING, S.FAILED, S.DOWN, S.RETIRED, S.POWERED_DOWN}),
    S.DRAINING: frozenset({S.UP, S.STOPPING, S.FAILED}),
    S.STOPPING: frozenset({S.POWERED_DOWN, S.FAILED}),
    S.FAILED: frozenset({S.STOPPING, S.POWERED_DOWN, S.RETIRED}),
    S.DOWN: frozenset({S.UP, S.POWERED_DOWN, S.RETIRED}),
    S.RETIRED: frozenset({S.POWERED_DOWN, S.UP, S.DOWN}),
}

# States in which a cloud node holds (or is about to hold) a billed instance.
ACTIVE_CLOUD_STATES = frozenset({S.LAUNCHING, S.BOOTING, S.UP, S.DRAINING, S.STOPPING})


# an on-prem node's power as the engine's record has it (the BMC's own answer, which may be
# "unknown", is `clustermgr providers instances NAME`)
POWER_BY_STATE = {
    S.POWERED_DOWN: "off",
    S.REQUESTED: "off",
    S.LAUNCHING: "powering-on",
    S.BOOTING: "powering-on",
    S.UP: "on",
    S.DRAINING: "on",
    S.STOPPING: "powering-off",
    S.FAILED: "powering-off",
}


def power_of(state: str) -> str:
    try:
        return POWER_BY_STATE.get(NodeState(state), "-")
    except ValueError:
        return "-"


def can_transition(old: NodeState, new: NodeState) -> bool:
    return new in ALLOWED[old]


def transition(
    node: Node, new: NodeState, reason: str, actor: str, *, now: datetime | None = None
) -> None:
    """Move `node` to `new` and add the event to the node's session (same transaction).

    Raises IllegalTransitionError, naming the node and both states, for a move that is not
    in ALLOWED. A move to the state the node is already in is not a transition: no-op.
    """
    from clustermgr.db.models import NodeEvent

    moved = _move(node, new, reason, actor, now or datetime.now(UTC))
    if moved is None:
        return
    columns, event = moved
    for column, value in columns.items():
        setattr(node, column, value)
    session = object_session(node)
    if session is not None and node.id is not None:
        # add the row directly: appending to node.events would first load the whole history
        session.add(NodeEvent(node_id=node.id, **event))
    else:
        node.events.append(NodeEvent(**event))


def transition_all(
    session: Session,
    moves: Sequence[Move],
    new: NodeState,
    actor: str,
    now: datetime,
) -> None:
    """transition() for many loaded nodes, each (node, reason, other columns to set), written
    at once: the rows as batched UPDATEs, each row's version checked
    (clustermgr/db/batched.py; StaleDataError as from a flush), the events as one INSERT."""
    from clustermgr.db.batched import insert_rows, update_versioned
    from clustermgr.db.models import NodeEvent

    changes: list[tuple[Node, Mapping[str, object]]] = []
    events = []
    for node, reason, more in moves:
        moved = _move(node, new, reason, actor, now)
        if moved is None:
            changes.append((node, more))
            continue
        columns, event = moved
        changes.append((node, {**more, **columns}))
        events.append({"node_id": node.id, **event})
    update_versioned(session, [(node, columns) for node, columns in changes if columns])
    insert_rows(session, NodeEvent.__table__, events)  # type: ignore[arg-type]


def _move(
    node: Node, new: NodeState, reason: str, actor: str, at: datetime
) -> tuple[dict[str, object], dict[str, object]] | None:
    """The node's new state columns and the event's, or None when it stays put."""
    from clustermgr.core.reasons import kind_of

    try:
        old = NodeState(node.state)
    except ValueError:  # a row no cm-scale wrote: refuse to move it, say which
        raise IllegalTransitionError(
            f"node {node.name}: state {str(node.state)[:40]!r} in the database is not a "
            f"clustermgr state; not moved to {new.value} (see `clustermgr nodes history "
            f"{node.name}` for the last state clustermgr wrote)"
        ) from None
    if old is new:
        return None
    if not can_transition(old, new):
        raise IllegalTransitionError(
            f"node {node.name}: {old.value} -> {new.value} is not an allowed transition "
            f"(from {old.value}: {', '.join(sorted(s.value for s in ALLOWED[old]))})"
        )
    columns: dict[str, object] = {
        "state": new.value,
        "state_reason": reason,
        "state_since": at,
        "updated_at": at,
    }
    event: dict[str, object] = {
        "at": at,
        "old_state": old.value,
        "new_state": new.value,
        "reason": reason,
        "reason_kind": kind_of(reason),
        "actor": actor,
    }
    return columns, event

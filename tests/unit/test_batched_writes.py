"""Node moves written in batches (clustermgr/db/batched.py, transition_all) keep what the
ORM's one-UPDATE-per-row flush gave: each row's version checked and moved on by one, an
event per move in order, and a row another writer moved since it was read failing the
whole transaction (StaleDataError), not half of it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.orm.exc import StaleDataError

from clustermgr.db.database import Database
from clustermgr.db.models import InstanceRun, Node, NodeEvent
from clustermgr.nodes.states import NodeState, transition, transition_all
from clustermgr.providers.base import CloudInstance, InstanceState
from clustermgr.scaling.clamp import LaunchOrder
from tests.unit import test_ownership
from tests.unit.test_ownership import actor

NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)
database = test_ownership.database  # the fixture: 4 cloud slots g1-g4, powered down
NAMES = ("g1", "g2", "g3", "g4")


def rows(database: Database) -> dict[str, tuple[str, int, str | None]]:
    with database.session() as session:
        return {n.name: (n.state, n.version, n.request_id) for n in session.scalars(select(Node))}


def history(database: Database, name: str) -> list[tuple[str, str, str]]:
    with database.session() as session:
        node = session.scalars(select(Node).where(Node.name == name)).one()
        events = session.scalars(
            select(NodeEvent).where(NodeEvent.node_id == node.id).order_by(NodeEvent.id)
        )
        return [(e.old_state, e.new_state, e.reason) for e in events]


def instance(n: int, name: str) -> CloudInstance:
    return CloudInstance(
        instance_id=f"i-{n}",
        node_name=name,
        state=InstanceState.PENDING,
        private_address=f"10.0.0.{n}",
        instance_type="p4d.24xlarge",
        zone="us-east-1a",
        lifecycle="on-demand",
        launch_time=NOW,
        tags={},
    )


def test_a_launch_moves_every_node_once_with_its_event_and_cost_record(
    database: Database,
) -> None:
    before = rows(database)
    act = actor(database, [NOW])
    act.begin_launch(LaunchOrder("gpu", NAMES, "on-demand", "r-1", "demand"))
    act.bind("gpu", {name: instance(i, name) for i, name in enumerate(NAMES, 1)})
    after = rows(database)
    for name in NAMES:
        assert after[name] == ("BOOTING", before[name][1] + 2, "r-1")
        assert history(database, name)[-2:] == [
            ("POWERED_DOWN", "LAUNCHING", "demand"),
            ("LAUNCHING", "BOOTING", f"instance i-{NAMES.index(name) + 1} (p4d.24xlarge) started"),
        ]
    with database.session() as session:
        node = session.scalars(select(Node).where(Node.name == "g3")).one()
        assert (node.instance_id, node.private_address, node.launched_at) == (
            "i-3",
            "10.0.0.3",
            NOW,
        )
        runs = {r.node: (r.instance_id, r.started_at) for r in session.scalars(select(InstanceRun))}
    assert runs == {name: (f"i-{i}", NOW) for i, name in enumerate(NAMES, 1)}


def test_a_row_moved_by_another_writer_fails_the_whole_batch_and_writes_nothing(
    database: Database,
) -> None:
    before = rows(database)
    with pytest.raises(StaleDataError), database.session() as session:
        nodes = list(session.scalars(select(Node).where(Node.name.in_(NAMES)).order_by(Node.name)))
        with database.session() as other:  # another daemon moves g3 meanwhile
            theirs = other.scalars(select(Node).where(Node.name == "g3")).one()
            transition(theirs, NodeState.REQUESTED, "theirs", "other", now=NOW)
        moves = [(n, "ours", {"request_id": "r-2"}) for n in nodes]
        transition_all(session, moves, NodeState.LAUNCHING, "us", NOW)
    after = rows(database)
    assert after["g3"] == ("REQUESTED", before["g3"][1] + 1, None)
    for name in ("g1", "g2", "g4"):
        assert after[name] == before[name]
        assert ("POWERED_DOWN", "LAUNCHING", "ours") not in history(database, name)


def test_later_orm_changes_to_a_batched_row_still_check_its_new_version(
    database: Database,
) -> None:
    before = rows(database)
    with database.session() as session:
        nodes = list(session.scalars(select(Node).where(Node.name.in_(NAMES))))
        transition_all(session, [(n, "go", {}) for n in nodes], NodeState.LAUNCHING, "us", NOW)
        nodes[0].state_reason = "changed after"  # flushed by the ORM at commit
    after = rows(database)
    assert after[nodes[0].name][1] == before[nodes[0].name][1] + 2
    assert all(after[n.name][1] == before[n.name][1] + 1 for n in nodes[1:])

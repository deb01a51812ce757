"""A step of the wall clock is not time that passed (scaling/clockstep.py): the watch tells
a step from a late thread, and moving the timers keeps each one's age, so a booting node is
not timed out by a forward step and a back-off does not last longer after a backward one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from clustermgr.config import parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, Node
from clustermgr.nodes.states import NodeState, transition
from clustermgr.scaling.clockstep import ClockWatch, shift_timers
from clustermgr.scaling.protection import judge_backoff

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
HOUR = 3600.0


class Clocks:
    def __init__(self) -> None:
        self.wall, self.mono = 1_800_000_000.0, 100.0

    def advance(self, seconds: float, step: float = 0.0) -> None:
        self.mono += seconds
        self.wall += seconds + step


def test_the_watch_reports_a_step_either_way_not_a_late_thread() -> None:
    clocks = Clocks()
    watch = ClockWatch(wall=lambda: clocks.wall, monotonic=lambda: clocks.mono)
    clocks.advance(30)  # a long cycle: both clocks moved alike
    assert watch.step() is None
    clocks.advance(0.5, step=HOUR)
    assert watch.step() == HOUR
    assert watch.step() is None  # reported once
    clocks.advance(0.5, step=-2 * HOUR)
    assert watch.step() == -2 * HOUR
    clocks.advance(0.5, step=1.0)  # what chrony slews or steps at once: no timer cares
    assert watch.step() is None


def _database(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    db.upgrade()
    return db


def _booting_node(db: Database, at: datetime) -> None:
    with db.session() as session:
        node = Node(name="burst-1", kind="cloud", state="POWERED_DOWN", template="gpu")
        session.add(node)
        transition(node, NodeState.LAUNCHING, "queue_depth", "test", now=at)
        transition(node, NodeState.BOOTING, "bound", "test", now=at + timedelta(seconds=5))
        node.launched_at = at + timedelta(seconds=2)
        node.idle_since = at + timedelta(seconds=1)


def test_a_step_moves_every_timer_so_each_keeps_its_age(tmp_path: Path) -> None:
    db = _database(tmp_path)
    settings = parse_settings({})
    _booting_node(db, T0)
    for step, events in ((HOUR, 2), (-2 * HOUR, 3)):  # LAUNCHING, BOOTING (, the 1st step)
        with db.session() as session:
            before = session.scalars(select(Node)).one()
            ages = [before.state_since, before.launched_at, before.idle_since]
            times = [e.at for e in before.events]
        report = shift_timers(db, settings, step, now=T0 + timedelta(seconds=10 + step))
        assert report.nodes == 1 and report.events == events
        with db.session() as session:
            node = session.scalars(select(Node)).one()
            moved = [node.state_since, node.launched_at, node.idle_since]
            assert moved == [a + timedelta(seconds=step) for a in ages if a is not None]
            assert [e.at for e in node.events] == [a + timedelta(seconds=step) for a in times]
    with db.session() as session:
        lines = session.scalars(select(ClusterEvent.message)).all()
    assert lines[0].startswith("the wall clock stepped forward by 3600 s")
    assert lines[1].startswith("the wall clock stepped back by 7200 s")
    db.dispose()


def test_events_older_than_any_running_timer_keep_their_time(tmp_path: Path) -> None:
    db = _database(tmp_path)
    settings = parse_settings({})
    _booting_node(db, T0 - timedelta(days=3))  # long before any back-off or protection
    report = shift_timers(db, settings, HOUR, now=T0 + timedelta(seconds=HOUR))
    assert report.events == 0 and report.nodes == 1
    db.dispose()


def test_a_back_off_ends_when_it_would_have_without_the_step() -> None:
    settings = parse_settings({"daemon": {"launch_backoff_s": 30}})
    failed = [(T0, "TRANSIENT")]
    # 10 s after the failure the clock steps back an hour: unmoved, the back-off would
    # last an hour and 20 s more; moved with the clock, it ends 20 s later as it should
    stepped_now = T0 + timedelta(seconds=10 - HOUR)
    assert judge_backoff(failed, settings, stepped_now + timedelta(seconds=25)) is not None
    moved = [(T0 - timedelta(seconds=HOUR), "TRANSIENT")]
    assert judge_backoff(moved, settings, stepped_now + timedelta(seconds=25)) is None

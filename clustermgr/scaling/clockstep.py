"""A step of the wall clock (an NTP `makestep`, `date -s`, a VM resumed) is not time that
passed: cm-scale's timers must neither count it nor wait it out.

Every timer of cm-scale is a wall-clock difference against a time stored in the database:
a node's boot timeout (`launched_at`, else `state_since`), its idle time (`idle_since`), a
director's boot and idle timers, a template's back-off and protection (the time of its last
failure event). A forward step of an hour would fail every booting node at once and stop
every idle one; a backward step would hold idle nodes, back-offs and protections an hour
longer. So the daemon compares the wall clock with the monotonic clock (which no step
moves) and, on a step, moves every running timer's start by the step in one transaction:
each timer keeps the age it had. APScheduler, which schedules by the wall clock, is
re-armed by the daemon (a backward step would otherwise stall every job for its size).

What moves: the nodes' and directors' timer columns, and the node and cluster events
recent enough to feed a back-off or a protection (`event_window`). Older history keeps
the times the clock gave when it was written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from clustermgr.config import Settings
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, Director, Node, NodeEvent
from clustermgr.scaling.observe import FAILURE_MEMORY

# chrony's default makestep is 1 s, ntpd's step threshold 0.128 s; a cycle's own jitter
# (a thread scheduled late) shows on both clocks alike, so a few seconds is no step
STEP_MIN_S = 5.0
CLOCK_STEP_EVENT = "clock-step"


@dataclass(frozen=True)
class ShiftReport:
    step_s: float
    nodes: int
    directors: int
    events: int

    def line(self) -> str:
        way = "forward" if self.step_s > 0 else "back"
        return (
            f"the wall clock stepped {way} by {abs(self.step_s):.0f} s (NTP step or date "
            f"set?): no timer counts it; moved the timers of {self.nodes} node(s), "
            f"{self.directors} director(s) and {self.events} recent event(s) with it"
        )


class ClockWatch:
    """Reports how far the wall clock moved, beyond the monotonic clock, since the last
    reading. Thread-safe: the daemon's main loop and each cycle both read it, so a cycle
    that starts right after a step sees it before it judges any timer."""

    def __init__(
        self,
        min_step_s: float = STEP_MIN_S,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_step_s = min_step_s
        self._wall, self._monotonic = wall, monotonic
        self._lock = threading.Lock()
        self._last = (wall(), monotonic())

    def step(self) -> float | None:
        """The step in seconds (negative: backward) if the clock stepped, else None."""
        with self._lock:
            wall, mono = self._wall(), self._monotonic()
            last_wall, last_mono = self._last
            self._last = (wall, mono)
        drift = (wall - last_wall) - (mono - last_mono)
        return drift if abs(drift) >= self.min_step_s else None


def event_window(settings: Settings, step_s: float) -> timedelta:
    """How far back events still feed a running timer (the longest back-off or protection,
    the failure memory of observe), plus the step itself."""
    d = settings.daemon
    longest = max(FAILURE_MEMORY.total_seconds(), d.protect_backoff_s, d.launch_backoff_max_s)
    return timedelta(seconds=longest + abs(step_s))


def shift_timers(
    db: Database, settings: Settings, step_s: float, now: datetime | None = None
) -> ShiftReport:
    """Move every running timer's start by `step_s`, in one transaction, and record the
    step as a cluster event."""
    now = now or datetime.now(UTC)
    delta = timedelta(seconds=step_s)
    since = now - event_window(settings, step_s)
    with db.session() as session:
        nodes = 0
        for node in session.scalars(select(Node)):
            if _shift(node, ("state_since", "idle_since", "launched_at"), delta):
                nodes += 1
        directors = 0
        for director in session.scalars(select(Director)):
            if _shift(director, ("state_since", "idle_since", "launched_at", "healthy_at"), delta):
                directors += 1
        events = 0
        for event in [
            *session.scalars(select(NodeEvent).where(NodeEvent.at >= since)),
            *session.scalars(select(ClusterEvent).where(ClusterEvent.at >= since)),
        ]:
            event.at = event.at + delta
            events += 1
        report = ShiftReport(step_s, nodes, directors, events)
        session.add(
            ClusterEvent(at=now, kind=CLOCK_STEP_EVENT, source="cm-scale", message=report.line())
        )
    return report


def _shift(row: object, columns: tuple[str, ...], delta: timedelta) -> bool:
    moved = False
    for column in columns:
        value = getattr(row, column)
        if value is not None:
            setattr(row, column, value + delta)
            moved = True
    return moved

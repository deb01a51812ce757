"""Progress marks: how cm-scale's watchdog tells a slow cycle from a stuck one.

A cycle (or the catalog refresh, or a job waiting for the work lock) runs inside
`PROGRESS.running(name)`. The code it calls marks the boundaries it already has: `step()`
names what starts now (a Slurm command, a cloud API call, a launch order), `beat()` says
something finished (a database commit). Marks come from any thread (the AWS provider
tags instances from a pool), so they count for whatever is running, except marks made
under `quiet()`: the jobs that run beside a cycle (the heartbeat, the director syncs)
must not make a stuck cycle look busy with their own commits. While something
runs and no mark came for longer than the stall limit, `stall()` says what and since
when, and the watchdog (clustermgr/runtime/watchdog.py) stops feeding systemd. Outside
`running()` (the CLI, `cm-scale --once`) a mark costs a lock and changes nothing.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Stall:
    activity: str  # what was running: "scale cycle", "catalog refresh", ...
    step: str  # the last step it began (or "its start")
    stalled_s: float  # seconds since the last mark
    running_s: float  # seconds since the activity began

    def line(self) -> str:
        return (
            f"{self.activity} stalled: no progress for {self.stalled_s:.0f} s in {self.step} "
            f"(running {self.running_s:.0f} s)"
        )


class Progress:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._running: dict[int, tuple[str, float]] = {}  # token -> (activity, began at)
        self._step = "its start"
        self._step_at = clock()
        self._local = threading.local()  # .quiet: this thread's marks do not count
        self.gate: Callable[[str], None] | None = None

    @contextmanager
    def running(self, activity: str) -> Iterator[None]:
        with self._lock:
            token = next(self._ids)
            self._running[token] = (activity, self._clock())
        try:
            yield
        finally:
            with self._lock:
                del self._running[token]

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Marks this thread makes meanwhile are not the cycle's progress."""
        self._local.quiet = True
        try:
            yield
        finally:
            self._local.quiet = False

    def step(self, what: str) -> None:
        """`what` begins now (and whatever came before it ended). The gate, when one is
        set, may refuse it by raising: cm-scale's lease check before every Slurm command
        and cloud API call a cycle makes (runtime/leader.py)."""
        if getattr(self._local, "quiet", False):
            return
        with self._lock:
            self._step = what
            self._step_at = self._clock()
        gate = self.gate
        if gate is not None:
            gate(what)

    def beat(self) -> None:
        """Something finished inside the current step."""
        if getattr(self._local, "quiet", False):
            return
        with self._lock:
            self._step_at = self._clock()

    def stall(self, limit_s: float) -> Stall | None:
        """The oldest running activity, when no mark came for more than `limit_s` since it
        (or its last mark) began; None while everything runs on or nothing runs."""
        with self._lock:
            if not self._running:
                return None
            activity, began = min(self._running.values(), key=lambda item: item[1])
            now = self._clock()
            since = max(self._step_at, began)
            if now - since <= limit_s:
                return None
            step = self._step if self._step_at >= began else "its start"
            return Stall(activity, step, now - since, now - began)


PROGRESS = Progress()  # the process's one tracker: cycles run one at a time (the work lock)


def step(what: str) -> None:
    PROGRESS.step(what)


def beat() -> None:
    PROGRESS.beat()

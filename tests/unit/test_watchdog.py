"""The progress marks and the watchdog's decision to ping, on a clock the test turns.
(The real daemon, its real pings and a real hang: tests/integration/test_daemon_schedule.py.)"""

from __future__ import annotations

import logging
import threading

import pytest

from clustermgr.core.progress_marks import Progress
from clustermgr.runtime.watchdog import Watchdog, watchdog_period


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_running_activity_without_marks_past_the_limit_is_a_stall_naming_its_step() -> None:
    clock = Clock()
    progress = Progress(clock)
    assert progress.stall(10) is None  # nothing runs
    with progress.running("scale cycle"):
        progress.step("provider aws1: EC2 CreateFleet")
        clock.now += 9
        assert progress.stall(10) is None
        clock.now += 2
        stall = progress.stall(10)
        assert stall is not None
        assert stall.line() == (
            "scale cycle stalled: no progress for 11 s in provider aws1: EC2 CreateFleet "
            "(running 11 s)"
        )
        progress.beat()  # the call returned
        assert progress.stall(10) is None
    clock.now += 100
    assert progress.stall(10) is None  # the cycle ended: idle is not stuck


def test_a_mark_from_before_the_activity_began_does_not_name_its_step() -> None:
    clock = Clock()
    progress = Progress(clock)
    progress.step("`squeue` of the CLI")
    clock.now += 50
    with progress.running("reconcile"):
        clock.now += 20
        stall = progress.stall(10)
        assert stall is not None and stall.step == "its start" and stall.stalled_s == 20


def test_quiet_marks_do_not_hide_a_stall() -> None:
    clock = Clock()
    progress = Progress(clock)
    with progress.running("scale cycle"):
        progress.step("`squeue --states=PENDING`")
        clock.now += 30

        def heartbeat() -> None:
            with progress.quiet():
                progress.beat()
                progress.step("the heartbeat's commit")

        beside = threading.Thread(target=heartbeat)
        beside.start()
        beside.join()
        stall = progress.stall(10)
        assert stall is not None and stall.step == "`squeue --states=PENDING`"


@pytest.mark.parametrize(
    ("environ", "period"),
    [
        ({"WATCHDOG_USEC": "120000000"}, 40.0),
        ({"WATCHDOG_USEC": "120000000", "WATCHDOG_PID": "4242"}, 40.0),
        ({"WATCHDOG_USEC": "120000000", "WATCHDOG_PID": "1"}, None),  # another process's
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_the_ping_period_is_a_third_of_watchdogsec_and_only_for_this_process(
    environ: dict[str, str], period: float | None
) -> None:
    assert watchdog_period(environ, pid=4242) == period


def test_the_watchdog_pings_while_progressing_says_once_when_it_stops_and_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    progress = Progress(clock)
    pings: list[float] = []
    dog = Watchdog(5, 1.0, progress, ping=lambda: pings.append(clock.now) or True)
    with caplog.at_level(logging.INFO, logger="cm-scale"), progress.running("scale cycle"):
        progress.step("`scontrol update`")
        for _ in range(10):
            clock.now += 1
            dog.check()
        assert pings == [1001.0, 1002.0, 1003.0, 1004.0, 1005.0]
        stalled = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
        assert len(stalled) == 1 and "in `scontrol update`" in stalled[0]
        assert "stall_timeout_s = 5" in stalled[0]
        assert dog.stalled is not None and dog.stalled.stalled_s == 10
        progress.beat()
        dog.check()
    assert pings[-1] == clock.now and dog.stalled is None
    assert any("made progress again" in r.getMessage() for r in caplog.records)

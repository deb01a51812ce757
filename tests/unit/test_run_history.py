"""The site's run-time history (workload.history) and onprem_first's start estimates from it."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clustermgr.config import PolicyRef
from clustermgr.policy import RunHistory, RunningJob
from clustermgr.policy.fit import job_shape
from clustermgr.workload.base import WorkloadSnapshot
from clustermgr.workload.history import OUTLIVED, SHAPE, TIME_LIMIT, USER_SHAPE
from clustermgr.workload.squeue import RUNNING_FIELDS, RUNNING_HISTORY_FIELDS, parse_running
from tests.unit.test_policies import NOW, SLOTS, job, run, view

HOUR = 3600.0
SHAPE_A = job_shape(job("a"))
SHAPE_B = job_shape(job("b", nodes=2))


def test_the_estimate_falls_back_from_user_and_shape_to_shape_to_the_time_limit() -> None:
    history = RunHistory()
    assert history.estimate("alice", SHAPE_A, HOUR).source == TIME_LIMIT
    for _ in range(3):
        history.record("bob", SHAPE_A, HOUR, 0.5 * HOUR)
    by_shape = history.estimate("alice", SHAPE_A, 2 * HOUR)
    assert (by_shape.source, by_shape.runs, by_shape.seconds) == (SHAPE, 3, HOUR)
    for _ in range(3):
        history.record("alice", SHAPE_A, HOUR, 0.1 * HOUR)
    mine = history.estimate("alice", SHAPE_A, 2 * HOUR)
    assert (mine.source, mine.runs) == (USER_SHAPE, 3)
    assert mine.seconds == pytest.approx(0.2 * HOUR)  # her ratio, scaled to this job's limit
    # another shape has no history: its limit
    other = history.estimate("alice", SHAPE_B, HOUR)
    assert (other.source, other.seconds) == (TIME_LIMIT, HOUR)
    assert "its user's last 3 runs of its shape" in mine.describe()
    assert "fewer than 3 past runs" in other.describe()


def test_a_high_quantile_of_ratios_shrugs_off_outliers() -> None:
    history = RunHistory()
    for _ in range(18):
        history.record("alice", SHAPE_A, HOUR, 0.2 * HOUR)
    history.record("alice", SHAPE_A, HOUR, 0.0)  # failed at once
    history.record("alice", SHAPE_A, HOUR, 5 * HOUR)  # past its limit: counts as the limit
    estimate = history.estimate("alice", SHAPE_A, HOUR, quantile=0.9)
    assert estimate.seconds == pytest.approx(0.2 * HOUR)
    assert history.estimate("alice", SHAPE_A, HOUR, quantile=1.0).seconds == HOUR


def test_nonsense_is_not_learned() -> None:
    history = RunHistory()
    assert not history.record("alice", SHAPE_A, 0, 10)  # no limit: no ratio
    assert not history.record("alice", SHAPE_A, HOUR, -1)
    assert not history.record("alice", SHAPE_A, HOUR, float("nan"))
    assert not history.record("alice", SHAPE_A, float("inf"), 10)
    assert history.recorded == 0 and len(history) == 0


def test_memory_is_bounded_by_recent_runs_and_keys() -> None:
    history = RunHistory(recent=4, max_keys=3, min_runs=1)
    for _ in range(4):
        history.record("alice", SHAPE_A, HOUR, 0.9 * HOUR)
    for _ in range(4):
        history.record("alice", SHAPE_A, HOUR, 0.1 * HOUR)  # the old runs fall out
    assert history.estimate("alice", SHAPE_A, HOUR).seconds == pytest.approx(0.1 * HOUR)
    for user in ("u1", "u2", "u3"):
        history.record(user, SHAPE_B, HOUR, HOUR)
    assert len(history) == 3  # alice's key, the least recently fed, went first
    assert history.estimate("alice", SHAPE_A, HOUR).source == SHAPE


def running(job_id: str, started_min: float, limit_min: float, user: str = "alice") -> RunningJob:
    start = NOW - timedelta(minutes=started_min)
    return RunningJob(
        job_id,
        ("op1",),
        start + timedelta(minutes=limit_min),
        start,
        user,
        SHAPE_A,
        limit_min * 60,
    )


def taught(ratio: float, runs: int = 5, user: str = "alice") -> RunHistory:
    history = RunHistory()
    for _ in range(runs):
        history.record(user, SHAPE_A, HOUR, ratio * HOUR)
    return history


ONPREM_FIRST = [
    PolicyRef(name="onprem_first", options={"minutes": 15}),
    PolicyRef(name="queue_depth"),
]


def test_onprem_first_holds_a_job_history_says_starts_soon() -> None:
    # one running job, 2 h limit, started 50 min ago: Slurm expects the pending job at 13:10
    # alice's jobs of its shape run half their limit: it ends at 12:10
    ahead = running("7", started_min=50, limit_min=120)
    pending = job("1", estimated_start=ahead.end_time)
    by_limits = run(ONPREM_FIRST, view(SLOTS, [pending], running=(ahead,)))
    assert by_limits.launching() == 1 and not by_limits.held
    by_history = run(
        ONPREM_FIRST, view(SLOTS, [pending], running=(ahead,), run_history=taught(0.5))
    )
    assert by_history.launching() == 0
    reason = by_history.held["1"]
    assert "expected to start by 12:10, not 13:10 as Slurm's time limits say" in reason
    assert "job 7, by the p90 of its user's last 5 runs of its shape" in reason
    # switched off, the policy believes Slurm's limits
    off = [PolicyRef(name="onprem_first", options={"minutes": 15, "history": False})]
    assert not run(off, view(SLOTS, [pending], running=(ahead,), run_history=taught(0.5))).held


def test_onprem_first_waits_for_every_job_slurm_expects_to_end_first() -> None:
    # Slurm's estimate is job 7's limit end (13:10); job 8's limit ends before it (12:55)
    short = running("7", started_min=50, limit_min=120)
    long = running("8", started_min=20, limit_min=75, user="bob")  # bob has no history
    pending = job("1", estimated_start=short.end_time)
    decision = run(
        ONPREM_FIRST, view(SLOTS, [pending], running=(short, long), run_history=taught(0.5))
    )
    # bob's job falls back to its shape's history (alice's runs): it ends 12:17, not soon
    assert decision.launching() == 1 and not decision.held
    sooner = view(SLOTS, [pending], running=(short, long), run_history=taught(0.45))
    reason = run(ONPREM_FIRST, sooner).held["1"]  # 12:04 and 12:13
    assert "by 12:13" in reason and "the 2 running jobs it waits for" in reason
    assert "job 8, by the p90 of the last 5 runs of its shape (any user)" in reason


def test_onprem_first_uses_the_limit_once_a_job_outlived_its_history() -> None:
    late = running("7", started_min=100, limit_min=120)  # past half its limit already
    pending = job("1", estimated_start=late.end_time + timedelta(minutes=5))
    held = run(ONPREM_FIRST, view(SLOTS, [pending], running=(late,), run_history=taught(0.5)))
    # by its limit it ends 12:20, Slurm's start is on the grid after it: within 15 min? no
    assert not held.held
    from policies.onprem_first import expected_end

    v = view(SLOTS, [pending], running=(late,), run_history=taught(0.5))
    end, by = expected_end(v, late, 0.9)
    assert end == late.end_time and by.source == OUTLIVED
    assert "run longer than the p90 of 5 past runs" in by.describe()


def test_onprem_first_leaves_an_estimate_that_waits_for_no_running_job() -> None:
    ahead = running("7", started_min=50, limit_min=120)
    # Slurm waits for a pending job ahead of it (an hour after job 7's end): history on the
    # running job says nothing about that
    pending = job("1", estimated_start=ahead.end_time + timedelta(hours=1))
    decision = run(ONPREM_FIRST, view(SLOTS, [pending], running=(ahead,), run_history=taught(0.1)))
    assert decision.launching() == 1 and not decision.held


def test_onprem_first_refuses_a_quantile_outside_0_1() -> None:
    from clustermgr.core.errors import ConfigError
    from clustermgr.policy.loader import load_chain

    with pytest.raises((ConfigError, ValueError), match=r"quantile 1\.5"):
        load_chain([PolicyRef(name="onprem_first", options={"quantile": 1.5})])


def running_line(job_id: str, user: str = "alice", start: str = "2026-11-22T11:00:00") -> str:
    values = {
        "JobArrayID": job_id,
        "NodeList": "op[1-2]",
        "EndTime": "2026-11-22T13:00:00",
        "StartTime": start,
        "TimeLimit": "2:00:00",
        "UserName": user,
        "Partition": "batch",
        "NumNodes": "2",
        "NumTasks": "2",
        "tres-alloc": "cpu=8,mem=2000M,node=2,billing=8",
        "tres-per-node": "N/A",
        "tres-per-job": "N/A",
        "tres-per-task": "N/A",
        "Feature": "(null)",
    }
    return "\t".join(values[name] for name in (*RUNNING_FIELDS, *RUNNING_HISTORY_FIELDS)) + "\t"


def test_squeue_running_lines_carry_what_the_history_learns_from(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "\n".join(
        [running_line("7"), running_line("8", user="bad user\x1b"), running_line("9", start="x")]
    )
    with caplog.at_level(logging.WARNING, "clustermgr.workload"):
        jobs = {job.job_id: job for job in parse_running(text)}
    seven = jobs["7"]
    assert seven.nodes == ("op1", "op2") and seven.user == "alice"
    assert seven.start_time == datetime(2026, 11, 22, 11, 0, tzinfo=UTC)
    assert seven.time_limit_s == 7200 and seven.shape is not None
    assert seven.shape[:4] == ("batch", 2, 4, 1000)  # per node: 4 CPUs, 1000 MB
    # a line whose history fields are bad is still a running job (its nodes are busy)
    assert jobs["8"].shape is None and jobs["9"].start_time is None and jobs["8"].nodes
    messages = [r.getMessage() for r in caplog.records]
    assert (
        "(job 8) skipped: its history fields: user 'bad user\\x1b' is not a user name"
        in (messages[0])
    )
    assert "(job 9) skipped: its history fields: start time 'x' is not a time" in messages[1]


def snapshot(
    at_min: float, running: list[RunningJob], pending: tuple[str, ...] = ()
) -> WorkloadSnapshot:
    return WorkloadSnapshot(
        NOW + timedelta(minutes=at_min),
        {},
        tuple(job(j) for j in pending),
        tuple(running),
    )


def test_the_daemon_learns_a_run_when_a_job_it_saw_running_is_gone(tmp_path: Path) -> None:
    from clustermgr.db.database import Database
    from clustermgr.db.models import JobRun
    from clustermgr.scaling.runs import RunTracker, rows

    tracker = RunTracker()
    first = [running("7", 50, 120), running("8", 10, 60), running("9", 5, 60)]
    assert tracker.finished(snapshot(0, first)) == []  # nothing seen before
    # 7 ended, 8 was requeued (pending again), 9 still runs
    done = tracker.finished(snapshot(10, [first[2]], pending=("8",)))
    assert [(r.user, r.run_s) for r in done] == [("alice", 60 * 60.0)]  # 50 + 10 minutes
    # after a gap (Slurm unreadable, a standby taking over) when 9 ended is not known
    assert tracker.finished(snapshot(30, [])) == [] and tracker.running == {}
    database = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    database.upgrade()
    with database.session() as session:
        session.add_all(rows(done * 3))
        session.add(JobRun(finished_at=NOW, user="x", shape="[1, 2]", limit_s=60, run_s=1))
    restarted = RunTracker()  # a new daemon, or `policy dry-run`
    with database.session() as session:
        restarted.load(session)
    estimate = restarted.history.estimate("alice", SHAPE_A, HOUR)
    assert (estimate.source, estimate.runs) == (USER_SHAPE, 3)
    assert estimate.seconds == pytest.approx(HOUR / 2)  # 60 of 120 minutes
    assert restarted.history.recorded == 3  # the row that holds no shape is skipped
    database.dispose()

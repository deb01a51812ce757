"""The site's run-time history in the daemon: a job seen running in one cycle and gone the
next (and not pending again: a requeue) has finished. Its run time (to the cycle that saw
it gone, so up to one interval long) feeds the history policies read
(`ClusterView.run_history`) and is kept in `job_runs`, so a restarted daemon and `policy
dry-run` know it too. Rows are outside input when read back: a bad one is skipped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.db.models import JobRun
from clustermgr.workload.base import JobShape, RunningJob, WorkloadSnapshot
from clustermgr.workload.history import MAX_KEYS, RECENT_RUNS, RunHistory

# the most recent finished jobs read back at start: every key's RECENT_RUNS at most
LOADED_RUNS = 50_000
# snapshots further apart than this (Slurm unreadable, a standby that just took over):
# when the jobs gone since ended is not known well enough to learn from them
MAX_GAP_S = 600.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FinishedRun:
    finished_at: datetime
    user: str
    shape: JobShape
    limit_s: float
    run_s: float


class RunTracker:
    """The running jobs of the last cycle, and the history their ends teach."""

    def __init__(self) -> None:
        self.history = RunHistory(RECENT_RUNS, MAX_KEYS)
        self.loaded = False
        self.running: dict[str, RunningJob] = {}
        self.seen_at: datetime | None = None  # when `running` was read

    def load(self, session: Session) -> None:
        """Feed the history the most recent finished jobs the database keeps, oldest first."""
        rows = session.execute(
            select(JobRun.user, JobRun.shape, JobRun.limit_s, JobRun.run_s)
            .order_by(JobRun.finished_at.desc(), JobRun.id.desc())
            .limit(LOADED_RUNS)
        ).all()
        bad = 0
        for user, shape_text, limit_s, run_s in reversed(rows):
            shape = parse_shape(shape_text)
            if shape is None or not self.history.record(user, shape, limit_s, run_s):
                bad += 1
        if bad:
            log.warning("job_runs: %d rows skipped (not a job shape or not a run time)", bad)
        self.loaded = True

    def finished(self, workload: WorkloadSnapshot) -> list[FinishedRun]:
        """The jobs running last cycle that are gone now; remembers this cycle's. Nothing
        when the last snapshot is older than MAX_GAP_S (their ends are not known)."""
        now = workload.taken_at
        current = {job.job_id: job for job in workload.running}
        pending = {job.job_id for job in workload.pending}
        last, self.seen_at = self.seen_at, now
        gone, self.running = self.running, current
        if last is None or (now - last).total_seconds() > MAX_GAP_S:
            return []
        done = []
        for job_id, job in gone.items():
            if job_id in current or job_id in pending:
                continue
            if job.start_time is None or job.shape is None or not job.time_limit_s:
                continue
            run_s = (now - job.start_time).total_seconds()
            if run_s >= 0:
                limit = job.time_limit_s
                done.append(FinishedRun(now, job.user, job.shape, limit, min(run_s, limit)))
        return done

    def learn(self, runs: Sequence[FinishedRun]) -> None:
        for run in runs:
            self.history.record(run.user, run.shape, run.limit_s, run.run_s)


def rows(runs: Sequence[FinishedRun]) -> list[JobRun]:
    return [
        JobRun(
            finished_at=run.finished_at,
            user=run.user,
            shape=json.dumps(run.shape),
            limit_s=run.limit_s,
            run_s=run.run_s,
        )
        for run in runs
    ]


def parse_shape(text: str) -> JobShape | None:
    """A shape as `rows` wrote it, or None when the row holds something else."""
    try:
        fields = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(fields, list) or len(fields) != 10:
        return None
    partition, *numbers, model, features = fields
    if (
        not isinstance(partition, str)
        or not all(type(n) is int and n >= 0 for n in numbers)
        or not (model is None or isinstance(model, str))
        or not isinstance(features, list)
        or not all(isinstance(f, str) for f in features)
    ):
        return None
    nodes, cpus, memory, gpn, gpj, gpt, tasks = numbers
    return (partition, nodes, cpus, memory, gpn, gpj, gpt, tasks, model, tuple(features))

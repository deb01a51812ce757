"""A long queue read a column at a time, for the per-cycle loops over every pending job.

A capped cloud pool keeps thousands of jobs pending through hundreds of thousands of
replayed cycles, and queue_depth and the job accounting each walk the whole queue every
cycle. When the queue is uniform in what those loops ask (every job lacks resources, none
is too young, none is an array, none is held), their answer follows from the distinct job
shapes alone; these helpers find that out with C-level passes (`map`, `set`, `sum`) over
one attribute at a time instead of a Python-level step per job.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter

from clustermgr.policy.fit import ReasonMemo, shape_key
from clustermgr.workload.base import PendingJob

JOB_ID = attrgetter("job_id")
REASON = attrgetter("reason")
COMMENT = attrgetter("comment")
SHAPE_KEY = attrgetter("shape_key")
SUBMIT = attrgetter("submit_time")
ARRAY_TASKS = attrgetter("array_tasks")


def job_ids(jobs: Sequence[PendingJob]) -> list[str]:
    return list(map(JOB_ID, jobs))


def shape_keys(jobs: Sequence[PendingJob]) -> list[int]:
    """Every job's shape key (`policy.fit.shape_key`), in queue order."""
    keys = list(map(SHAPE_KEY, jobs))
    if 0 in keys:  # records not keyed yet (a job new this cycle)
        keys = [job.shape_key or shape_key(job) for job in jobs]
    return keys


def all_lack_resources(jobs: Sequence[PendingJob], memo: ReasonMemo) -> bool:
    """Every job pends for lack of resources, judged once per distinct reason. False when
    some job's reason is "None" (its comment decides, job by job)."""
    reasons = set(map(REASON, jobs))
    return "None" not in reasons and all(memo.lacks_resources_of(r) for r in reasons)


def all_submitted_by(jobs: Sequence[PendingJob], moment: datetime, unknown_ok: bool) -> bool:
    """Every job was submitted at or before `moment` (one with no submit time counts as
    such only when `unknown_ok`)."""
    submitted = list(map(SUBMIT, jobs))
    if None in submitted:
        if not unknown_ok:
            return False
        submitted = [at for at in submitted if at is not None]
    return not submitted or max(submitted) <= moment


def no_arrays(jobs: Sequence[PendingJob]) -> bool:
    """No pending array (every job counts one task)."""
    return not jobs or max(map(ARRAY_TASKS, jobs)) <= 1


def sum_in_order(keys: Sequence[int], value: dict[int, float]) -> float:
    """The sum of `value[key]` over `keys`, added in order from 0.0: the same float a loop
    adding one job's value at a time gets (CPython 3.11 adds floats one by one; from 3.12
    `sum` compensates rounding, which can only move the last bits)."""
    return sum(map(value.__getitem__, keys), 0.0)

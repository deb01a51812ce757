"""Compact squeue queries and their parsers.

`squeue --json` on Slurm 22.05 ignores --states and costs ~3 KB per job, so the queue is
read with `--Format` fields separated by tabs (free-text fields such as the reason and
features never hold a tab). A pending array is one line; its task count comes from the
ArrayTaskID range (`1-1000%10` counts 10 at a time), never from expanding it.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

from clustermgr.workload.base import PendingJob, RunningJob, shape_of

log = logging.getLogger("clustermgr.workload")
TAB = "\t"
NEWLINE = "\n"  # Slurm ends a record with \n alone: str.splitlines() would also split on
# \x1c-\x1e, \x85 and U+2028/U+2029, which a job's free-text fields may hold
SKIP_WARNINGS = 5  # per read: the first bad lines by name, then a count
# a job id as squeue prints it: 123, 123_4, 123_[1-1000%10], 123+0 (a het job's part)
JOB_ID = re.compile(r"[0-9]+(?:_(?:[0-9]+|\[[0-9,:%-]+\])|\+[0-9]+)?")
# what decides a job's shape (workload.base.shape_of), pending or running
SHAPE_FIELDS = (
    "Partition",
    "NumNodes",
    "NumTasks",
    "tres-alloc",
    "tres-per-node",
    "tres-per-job",
    "tres-per-task",
    "Feature",
)
PENDING_FIELDS = (
    "JobArrayID",
    "ArrayTaskID",
    *SHAPE_FIELDS,
    "TimeLimit",
    "SubmitTime",
    "StartTime",
    "UserName",
    "Requeue",
    "Reason",
)
# 0: no padding. The job's comment comes last: free text (a user's may even hold a tab),
# and a line without it (an older reader's stand-in) is still a job, with no comment
PENDING_FORMAT = ",".join(f"{name}:0{TAB}" for name in (*PENDING_FIELDS, "Comment"))
RUNNING_FIELDS = ("JobArrayID", "NodeList", "EndTime")
# what the site's run-time history (workload.history) learns from, in `_pending`'s terms
RUNNING_HISTORY_FIELDS = ("StartTime", "TimeLimit", "UserName", *SHAPE_FIELDS)
RUNNING_FORMAT = ",".join(f"{name}:0{TAB}" for name in (*RUNNING_FIELDS, *RUNNING_HISTORY_FIELDS))
USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@$-]{0,63}")

_GRES = re.compile(r"gpu(?::(?P<model>[A-Za-z][\w.-]*))?:(?P<count>\d+)")
_MEM = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[KMGT]?)$")
_MEM_UNITS = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


def parse_pending(text: str) -> list[PendingJob]:
    """Every pending job squeue printed; a line that cannot be read is skipped with a
    warning naming its job, and the rest of the queue is read."""
    jobs = []
    width = len(PENDING_FIELDS)
    skipped = _Skipped("pending")
    for number, line in _lines(text):
        fields = line.split(TAB)
        if len(fields) < width:
            skipped.add(number, fields[0], f"{len(fields)} fields, expected {width}")
            continue
        job_id = fields[0].strip()
        if not JOB_ID.fullmatch(job_id):
            skipped.add(number, job_id, "not a job id")
            continue
        try:
            job = _pending(*fields[:width])
            job.comment = comment(fields[width:])
            jobs.append(job)
        except (ValueError, KeyError, OverflowError) as exc:
            skipped.add(number, job_id, f"cannot parse {line[:80]!r}: {exc}")
    skipped.report()
    return jobs


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for each line that holds anything, split on \\n only."""
    for number, line in enumerate(text.split(NEWLINE), 1):
        if line.strip():
            yield number, line


class _Skipped:
    """The lines of one squeue read that were skipped: the first few named, then a count."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0

    def add(self, number: int, job_id: str, why: str) -> None:
        self.count += 1
        if self.count <= SKIP_WARNINGS:
            log.warning(
                "squeue %s line %d (job %s) skipped: %s", self.what, number, job_id[:40], why
            )

    def report(self) -> None:
        if self.count > SKIP_WARNINGS:
            log.warning(
                "squeue %s: %d more lines skipped (%d in all)",
                self.what,
                self.count - SKIP_WARNINGS,
                self.count,
            )


def _pending(  # one argument per squeue field, in PENDING_FIELDS order
    job_id: str,
    array_tasks: str,
    partition: str,
    num_nodes: str,
    num_tasks: str,
    tres_alloc: str,
    tres_per_node: str,
    tres_per_job: str,
    tres_per_task: str,
    features: str,
    time_limit: str,
    submit_time: str,
    start_time: str,
    user: str,
    requeue: str,
    reason: str,
) -> PendingJob:
    nodes_from_tres, cpus, memory = _tres(tres_alloc)
    nodes = nodes_from_tres or max(1, int(num_nodes or 1))
    model_node, gpus_node = _gpus(tres_per_node)
    model_job, gpus_job = _gpus(tres_per_job)
    model_task, gpus_task = _gpus(tres_per_task)
    features = features.strip()
    return PendingJob(
        job_id=job_id.strip(),
        partition=partition.strip(),
        nodes=nodes,
        tasks=int(num_tasks or 1),
        cpus_per_node=-(-cpus // nodes),
        memory_per_node_mb=-(-memory // nodes),
        gpus_per_node=gpus_node,
        gpu_model=model_node or model_job or model_task,
        gpus_per_job=gpus_job,
        gpus_per_task=gpus_task,
        features=() if features in ("", "(null)") else (features,),
        time_limit_min=time_limit_minutes(time_limit),
        submit_time=timestamp(submit_time),
        reason=reason.strip(),
        estimated_start=timestamp(start_time),
        array_tasks=array_task_count(array_tasks),
        user=user.strip(),
        requeue=requeue.strip() != "0",
    )


def comment(fields: list[str]) -> str:
    """The Comment field from what follows Reason (squeue ends it with a tab too); "" for
    none ('(null)')."""
    text = TAB.join(fields)
    text = text[:-1] if text.endswith(TAB) else text
    return "" if text.strip() == "(null)" else text


@functools.lru_cache(maxsize=4096)
def _tres(text: str) -> tuple[int, int, int]:
    """'cpu=4,mem=8000M,node=2,billing=4' -> (nodes, cpus, memory MB); queues repeat these."""
    tres = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
    return int(tres.get("node") or 0), int(tres.get("cpu") or 1), memory_mb(tres.get("mem", "0"))


def parse_running(text: str) -> list[RunningJob]:
    """Running jobs and their nodes; an unreadable line is skipped with a warning. A line
    whose history fields (RUNNING_HISTORY_FIELDS) cannot be read is still a running job,
    without them (the history learns nothing from it), and is named in a warning too."""
    from clustermgr.core.hostlists import HostlistError, expand

    jobs = []
    skipped = _Skipped("running")
    unread = _Skipped("running history")
    for number, line in _lines(text):
        fields = line.split(TAB)
        job_id = fields[0].strip()
        if len(fields) < len(RUNNING_FIELDS) or not JOB_ID.fullmatch(job_id):
            skipped.add(number, job_id, "not a job line")
            continue
        nodelist = fields[1].strip()
        try:
            nodes = tuple(expand(nodelist)) if nodelist and nodelist != "(null)" else ()
        except HostlistError as exc:
            skipped.add(number, job_id, f"node list {nodelist[:60]!r} is not a hostlist: {exc}")
            continue
        job = RunningJob(job_id=job_id, nodes=nodes, end_time=timestamp(fields[2]))
        extra = fields[len(RUNNING_FIELDS) : len(RUNNING_FIELDS) + len(RUNNING_HISTORY_FIELDS)]
        if len(extra) == len(RUNNING_HISTORY_FIELDS):
            try:
                job = with_history_fields(job, *extra)
            except (ValueError, KeyError, OverflowError) as exc:
                unread.add(number, job_id, f"its history fields: {exc}")
        jobs.append(job)
    skipped.report()
    unread.report()
    return jobs


def with_history_fields(  # one argument per squeue field, in RUNNING_HISTORY_FIELDS order
    job: RunningJob,
    start_time: str,
    time_limit: str,
    user: str,
    *shape: str,  # SHAPE_FIELDS
) -> RunningJob:
    """`job` with its start, user, shape and time limit (ValueError when one is not what
    squeue prints)."""
    user = user.strip()
    if not USER_NAME.fullmatch(user):
        raise ValueError(f"user {user[:40]!r} is not a user name")
    started = timestamp(start_time)
    if started is None:
        raise ValueError(f"start time {start_time[:40]!r} is not a time")
    fields = [job.job_id, "N/A", *shape, time_limit, "", start_time, user, "1", ""]
    fit = _pending(*fields)  # PENDING_FIELDS' order
    limit = fit.time_limit_min
    return replace(
        job,
        start_time=started,
        user=user,
        shape=shape_of(fit),
        time_limit_s=limit * 60.0 if limit else None,
    )


@functools.lru_cache(maxsize=1024)
def _gpus(text: str) -> tuple[str | None, int]:
    found = _GRES.search(text or "")
    if not found:
        return None, 0
    return found["model"], int(found["count"])


def memory_mb(text: str) -> int:
    found = _MEM.match(text.strip())
    if not found:
        return 0
    return math.ceil(float(found["n"]) * _MEM_UNITS[found["unit"]])


@functools.lru_cache(maxsize=4096)
def array_task_count(text: str) -> int:
    """'N/A' -> 1; '1-1000' -> 1000; '1-1000%10' -> 10; '1,3,5-7' -> 5; '0-99:2' -> 50."""
    text = text.strip()
    if not text or text == "N/A":
        return 1
    spec, _, throttle = text.partition("%")
    total = 0
    for part in spec.split(","):
        bounds, _, step = part.partition(":")
        low, _, high = bounds.partition("-")
        if not low.isdigit():
            return 1
        top = int(high) if high.isdigit() else int(low)
        total += (top - int(low)) // (int(step) if step.isdigit() and int(step) else 1) + 1
    if throttle.isdigit() and int(throttle) > 0:
        total = min(total, int(throttle))
    return max(total, 1)


@functools.lru_cache(maxsize=1024)
def time_limit_minutes(text: str) -> int | None:
    """'UNLIMITED' -> None; '30:00' -> 30; '2:00:00' -> 120; '1-02:00:00' -> 1560."""
    text = text.strip()
    if not text or text in ("UNLIMITED", "NOT_SET", "N/A", "INVALID"):
        return None
    days = 0
    if "-" in text:
        day_text, text = text.split("-", 1)
        days = int(day_text)
    parts = [int(p) for p in text.split(":")]
    hours, minutes, seconds = [0, 0, 0, *parts][-3:]
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


@functools.lru_cache(maxsize=65536)
def timestamp(text: str) -> datetime | None:
    text = text.strip()
    if not text or text in ("N/A", "Unknown", "None", "(null)"):
        return None
    try:
        local = datetime.fromisoformat(text)
    except ValueError:
        return None
    return local.astimezone(UTC) if local.tzinfo is None else local

"""The workload seam (Slurm today): typed snapshots in, node actions out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from clustermgr.core.inputs import has_control
from clustermgr.core.node_report import NodeReport
from clustermgr.core.reasons import is_hold


@dataclass(frozen=True)
class WorkloadNode:
    name: str
    state: str  # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, UNKNOWN, ...
    flags: frozenset[str]  # CLOUD, POWERED_DOWN, POWERING_UP, DRAIN, NOT_RESPONDING, ...
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0
    gpu_model: str | None = None
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    address: str | None = None
    hostname: str | None = None
    reason: str = ""
    report: NodeReport | None = None  # the node's image, revision and kernel (its Extra)

    @property
    def is_cloud(self) -> bool:
        return "CLOUD" in self.flags

    @property
    def powered_down(self) -> bool:
        return "POWERED_DOWN" in self.flags

    @property
    def powering_up(self) -> bool:
        return "POWERING_UP" in self.flags

    @property
    def power_up_asked(self) -> bool:
        """Powering up, or holding a power-up request Slurm has not acted on (`POWER_UP`).
        Asking such a node again leaves Slurm a second request, which 22.05 carries out
        even after the node has been powered down since: it powers the node up again."""
        return self.powering_up or "POWER_UP" in self.flags

    @property
    def completing(self) -> bool:
        """A job's epilog or cleanup still runs on it (`IDLE+COMPLETING` is not idle)."""
        return self.state == "COMPLETING" or "COMPLETING" in self.flags

    @property
    def idle(self) -> bool:
        """Up, and nothing running or finishing on it: a stop loses no work."""
        return (
            self.state == "IDLE"
            and not self.completing
            and not self.powered_down
            and not self.powering_up
        )

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def held(self) -> bool:
        """Drained by clustermgr's hold, not by an admin or a health check (`is_hold`)."""
        return self.drained and is_hold(self.reason)

    @property
    def usable(self) -> bool:
        """Up and schedulable as far as Slurm is concerned."""
        return (
            self.state not in ("DOWN", "FUTURE", "UNKNOWN")
            and self.responding
            and not self.drained
            and not self.powered_down
        )


# what decides a job's fit (policy.fit.job_shape): partition, nodes, CPUs, memory, GPUs
# per node, per job and per task, tasks (with GPUs per task), GPU model, features
JobShape = tuple[str, int, int, int, int, int, int, int, str | None, tuple[str, ...]]


def shape_of(job: PendingJob) -> JobShape:
    """What decides a job's fit (policy.fit.job_shape memoizes it on the record)."""
    return (
        job.partition,
        job.nodes,
        job.cpus_per_node,
        job.memory_per_node_mb,
        job.gpus_per_node,
        job.gpus_per_job,
        job.gpus_per_task,
        job.tasks if job.gpus_per_task else 0,  # tasks decide the fit only with GPUs per task
        job.gpu_model,
        job.features,
    )


@dataclass(slots=True)  # not frozen: 3x cheaper to build, and queues hold 100,000 of them
class PendingJob:
    job_id: str
    partition: str
    nodes: int
    tasks: int
    cpus_per_node: int
    memory_per_node_mb: int
    gpus_per_node: int
    gpu_model: str | None
    gpus_per_job: int
    features: tuple[str, ...]
    time_limit_min: int | None
    submit_time: datetime | None
    reason: str
    estimated_start: datetime | None
    array_tasks: int = 1
    user: str = ""
    requeue: bool = True
    gpus_per_task: int = 0  # --gpus-per-task: each of `tasks` tasks needs this many on one node
    comment: str = ""  # the job's comment (`squeue -o %k`): cm-scale's verdict, or the user's
    # policy.fit.job_shape's memo: a queue is read by several policies and the accounting
    # every cycle, and a simulated job's record lives through many cycles
    shape_memo: JobShape | None = field(default=None, init=False, repr=False, compare=False)
    # policy.fit.shape_key's memo: one number per distinct shape, so a hot loop's dict keyed
    # by shape hashes an int, not a 10-tuple (0: not worked out yet)
    shape_key: int = field(default=0, init=False, repr=False, compare=False)

    @property
    def gpus_total(self) -> int:
        """Every GPU one task of the array asks for, however it was asked (--gres/
        --gpus-per-node per node, --gpus for the job, --gpus-per-task per task)."""
        return (
            self.gpus_per_node * self.nodes or self.gpus_per_job or self.gpus_per_task * self.tasks
        )


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    nodes: tuple[str, ...]
    end_time: datetime | None  # when its time limit ends it (what Slurm plans with)
    # what the site's run-time history (workload.history) reads: when it started, whose it
    # is, its shape (shape_of) and its time limit (None: unlimited, or not known)
    start_time: datetime | None = None
    user: str = ""
    shape: JobShape | None = None
    time_limit_s: float | None = None


@dataclass(frozen=True)
class WorkloadSnapshot:
    taken_at: datetime
    nodes: Mapping[str, WorkloadNode]
    pending: Sequence[PendingJob] = ()
    running: Sequence[RunningJob] = field(default_factory=tuple)


class Workload(Protocol):
    """What the engine needs from a workload manager. `SlurmCli` implements it; a pyslurm
    or slurmrestd backend is one more class with these methods."""

    def snapshot(self) -> WorkloadSnapshot:
        """Nodes, pending and running jobs, read together at the start of a cycle."""
        ...

    def node_states(self) -> dict[str, WorkloadNode]:
        """The nodes alone, read now (no job lists: cheap enough to read again mid-cycle)."""
        ...

    def config_values(self) -> dict[str, str]:
        """The controller's configuration (SLURM_VERSION, ResumeTimeout, ...)."""
        ...

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """Tell the controller each node's address (and host name = node name), batched."""
        ...

    def power_up(self, nodes: Sequence[str]) -> None: ...

    def power_down(self, nodes: Sequence[str], reason: str, force: bool = False) -> None:
        """Power nodes down with a reason; `force` requeues their jobs at once."""
        ...

    def set_down(self, nodes: Sequence[str], reason: str) -> None:
        """DOWN with a reason: out of scheduling until an admin resumes them."""
        ...

    def drain(self, nodes: Sequence[str], reason: str) -> None: ...

    def undrain(self, nodes: Sequence[str]) -> None:
        """Clear a drain and nothing else (the nodes become schedulable, or powered-down
        idle; a node that is not drained is left as it is)."""
        ...

    def comment_jobs(self, jobs: Sequence[str], text: str) -> None:
        """Set the comment of pending jobs (ids as the snapshot has them) to `text`, made
        one line of at most COMMENT_MAX characters by `comment_text`; "" clears it."""
        ...


_GRES_GPU = re.compile(r"(?:^|,)gpu(?::(?P<model>[A-Za-z][\w.-]*))?:(?P<count>\d+)")


def parse_gpu_gres(gres: str) -> tuple[str | None, int]:
    """'gpu:a100:8(S:0-1)' -> ('a100', 8); 'gpu:2' -> (None, 2); '(null)' -> (None, 0)."""
    total, model = 0, None
    for found in _GRES_GPU.finditer(gres or ""):
        total += int(found["count"])
        model = model or found["model"]
    return model, total


COMMENT_MAX = 250  # a line squeue and `scontrol show job` show whole


def comment_text(text: str) -> str:
    """A job comment as Slurm will store it: one line (control characters become spaces,
    runs of blanks one), at most COMMENT_MAX characters. Compare a job's comment with this,
    not with the text before it."""
    printable = "".join(" " if has_control(char) else char for char in text)
    return " ".join(printable.split())[:COMMENT_MAX].rstrip()


def reason_arg(reason: str) -> str:
    """`reason="..."` for scontrol: it re-splits its arguments on spaces, so a reason with
    spaces must be quoted inside the argument (and may not hold quotes itself); control
    characters (a NUL would not even make it into argv) become spaces."""
    printable = "".join(" " if has_control(char) else char for char in reason)
    text = " ".join(printable.replace('"', "'").split())[:250] or "clustermgr"
    return f'reason="{text}"'

"""Does a pending job fit a template? One place, used by policies and `policy dry-run`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from clustermgr.core.reasons import HOLD_PREFIX
from clustermgr.policy.view import ClusterView, TemplateView
from clustermgr.workload.base import JobShape as JobShape  # re-exported: policies read it here
from clustermgr.workload.base import PendingJob, shape_of

# Pending reasons that mean "not enough nodes" (Slurm's own reason strings).
RESOURCE_REASONS = frozenset(
    {
        "Resources",
        "Priority",
        "ReqNodeNotAvail",
        "NodeDown",
        "Nodes_required_for_job_are_DOWN",  # ", DRAINED or reserved for jobs in higher ..."
        "PowerUpNodes",
        "Reservation",
    }
)


def lacks_resources(job: PendingJob) -> bool:
    """squeue prints some reasons with spaces ("Nodes required for job are DOWN, ..."),
    others with underscores; compare them in the underscore form, by prefix. A job whose
    reason is None while it carries cm-scale's verdict in its comment waits as it did when
    that verdict was written: the write itself cleared Slurm's reason, which stays None
    until Slurm judges the job again (that may take long while every node it could use is
    held), and a job cm-scale gave a verdict of its own was waiting for nodes."""
    if job.reason == "None" and job.comment.startswith(HOLD_PREFIX):
        return True
    return reason_lacks_resources(job.reason)


def reason_lacks_resources(reason: str) -> bool:
    """Whether a pending reason (any but "None", see `lacks_resources`) means not enough
    nodes."""
    return reason.replace(" ", "_").startswith(RESOURCE_PREFIXES)


RESOURCE_PREFIXES = tuple(sorted(RESOURCE_REASONS))


class ReasonMemo:
    """`lacks_resources` over a whole queue, judged once per pending reason (a queue of
    100,000 jobs holds a handful of reasons); a reason of None depends on the job's comment,
    so it is judged each time."""

    def __init__(self) -> None:
        self.known: dict[str, bool] = {}  # reason -> lacks resources (a hot loop reads it)

    def lacks_resources(self, job: PendingJob) -> bool:
        known = self.known.get(job.reason)
        if known is None:
            known = lacks_resources(job)
            if job.reason != "None":
                self.known[job.reason] = known
        return known

    def lacks_resources_of(self, reason: str) -> bool:
        """For a reason other than "None" (that one depends on each job's comment)."""
        known = self.known.get(reason)
        if known is None:
            known = self.known[reason] = reason_lacks_resources(reason)
        return known


def job_shape(job: PendingJob) -> JobShape:
    """What decides a job's fit: jobs of one shape fit the same templates, so a queue of
    100,000 jobs needs the fit decided once per shape, not once per job. Worked out once
    per job record (the fields it reads are never changed on a record)."""
    if job.shape_memo is not None:
        return job.shape_memo
    job.shape_memo = shape = shape_of(job)
    return shape


_SHAPE_KEYS: dict[JobShape, int] = {}  # every shape seen, numbered from 1 (a few hundred)


def shape_key(job: PendingJob) -> int:
    """The job's shape as a number: equal shapes get the same one (`job_shape` for the
    shape itself). Worked out once per job record."""
    if not job.shape_key:
        shape = job_shape(job)
        job.shape_key = _SHAPE_KEYS.setdefault(shape, len(_SHAPE_KEYS) + 1)
    return job.shape_key


def required_features(constraint: tuple[str, ...]) -> set[str]:
    """Features a job demands; '&' and ',' join required ones, '|' choices are not required."""
    required: set[str] = set()
    for part in constraint:
        if "|" in part:
            continue
        for word in re.split(r"[&,\[\]()]+", part):
            feature = word.split("*", 1)[0].strip()  # "rack1*2": two nodes with rack1
            if feature:
                required.add(feature)
    return required


def nodes_on(job: PendingJob, template: TemplateView) -> int:
    """The nodes Slurm gives `job` on nodes like `template`'s. GPUs asked for the job
    (`--gpus`) or per task (`--gpus-per-task`) spread over as many nodes as they need, as
    Slurm spreads them, never over fewer nodes than the job asked for; GPUs per node
    (`--gres`, `--gpus-per-node`) leave the node count as it is."""
    if job.gpus_per_node or not template.gpus:
        return job.nodes
    if job.gpus_per_task:
        tasks_per_node = template.gpus // job.gpus_per_task
        return max(job.nodes, math.ceil(job.tasks / tasks_per_node)) if tasks_per_node else 1
    if job.gpus_per_job:
        return max(job.nodes, math.ceil(job.gpus_per_job / template.gpus))
    return job.nodes


def why_not(job: PendingJob, template: TemplateView) -> str | None:
    """None when one node of `template` can run one node's share of `job`, else the reason."""
    if job.cpus_per_node > template.cpus:
        return f"needs {job.cpus_per_node} CPUs per node, {template.name} has {template.cpus}"
    if job.memory_per_node_mb > template.memory_mb:
        return (
            f"needs {job.memory_per_node_mb} MB per node, {template.name} has "
            f"{template.memory_mb} MB"
        )
    if job.gpus_per_node > template.gpus:
        return f"needs {job.gpus_per_node} GPUs per node, {template.name} has {template.gpus}"
    if job.gpus_per_task > template.gpus:
        return f"needs {job.gpus_per_task} GPUs per task, {template.name} has {template.gpus}"
    if (job.gpus_per_job or job.gpus_per_task) and not template.gpus:
        return f"needs {job.gpus_total} GPUs, {template.name} has none"
    if job.gpus_total and job.gpu_model and job.gpu_model != template.gpu_model:
        return f"needs GPU model {job.gpu_model}, {template.name} has {template.gpu_model}"
    missing = required_features(job.features) - template.features
    if missing:
        return f"needs features {','.join(sorted(missing))}, {template.name} lacks them"
    nodes = nodes_on(job, template)
    if nodes > template.max_nodes:
        spread = (
            f" ({job.gpus_total} GPUs over {template.gpus}-GPU nodes)" if nodes > job.nodes else ""
        )
        return f"needs {nodes} nodes{spread}, {template.name} allows at most {template.max_nodes}"
    return None


def serving_templates(job: PendingJob, templates: Mapping[str, TemplateView]) -> list[TemplateView]:
    partitions = set(job.partition.split(","))
    return [t for t in templates.values() if t.partition in partitions]


def copies_per_node(job: PendingJob, template: TemplateView) -> int:
    """How many one-node jobs like `job` a node of `template` runs at once."""
    if nodes_on(job, template) != 1:
        return 1
    limits = [template.cpus // max(job.cpus_per_node, 1)]
    if job.memory_per_node_mb:
        limits.append(template.memory_mb // job.memory_per_node_mb)
    gpus = job.gpus_total
    if gpus:
        limits.append(template.gpus // gpus)
    return max(1, min(limits))


def nodes_for(job: PendingJob, template: TemplateView) -> float:
    """Nodes of `template` that `job` (every task of its array) keeps busy: a fraction when
    several of its one-node jobs share a node."""
    return nodes_on(job, template) * job.array_tasks / copies_per_node(job, template)


@dataclass(frozen=True)
class BurstDemand:
    """Pending work a cloud template could serve (array tasks counted one by one): what
    `clustermgr status` and the pending gauges report. A job only on-prem templates
    (BMC-powered nodes) or Slurm's own nodes serve is not burst demand."""

    jobs: int
    gpus: int


def burst_demand(view: ClusterView) -> BurstDemand:
    """The pending jobs some cloud template of their partitions fits (fit decided once per
    shape, as the accounting does)."""
    clouds = {name: t for name, t in view.templates.items() if not t.onprem}
    fits: dict[int, bool] = {}
    jobs = gpus = 0
    for job in view.pending:
        key = shape_key(job)
        fit = fits.get(key)
        if fit is None:
            fit = fits[key] = any(why_not(job, t) is None for t in serving_templates(job, clouds))
        if fit:
            jobs += job.array_tasks
            gpus += job.gpus_total * job.array_tasks
    return BurstDemand(jobs, gpus)

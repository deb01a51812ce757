"""Every pending job is accounted for in the plan: served by a launch (which one, its
nodes named), waiting (for nodes already up or coming, or for Slurm's own reason), refused
(with the policy's reason), unfit (with why, even when Slurm's pending reason hides it),
held, or other (no template serves its partition: Slurm's own nodes run it). A pending
array counts its tasks.

Queues hold 100,000 jobs: the fit is decided once per job shape, a fate once per (shape,
Slurm reason, comment) unless a policy held the job, and jobs are grouped by (status,
reason) so `policy dry-run` prints a line per group, not per job.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress
from operator import not_

from clustermgr.core.hostlists import compress as compress_hosts
from clustermgr.policy.decision import ScaleDecision
from clustermgr.policy.fit import lacks_resources, serving_templates, shape_key, why_not
from clustermgr.policy.queue import COMMENT, JOB_ID, REASON, no_arrays, shape_keys
from clustermgr.policy.view import ClusterView, TemplateView
from clustermgr.scaling.clamp import JobFate, LaunchOrder, Plan
from clustermgr.workload.base import PendingJob

SLURM_HOLDS = ("JobHeld", "Held")
SLURM_SAYS = "Slurm: "  # a fate whose reason is Slurm's own pending reason
COMBINATIONS = 64  # (shape, reason, comment) combinations worth judging for a uniform queue


def account_jobs(view: ClusterView, decision: ScaleDecision, plan: Plan) -> list[JobFate]:
    # launches and refusals name their jobs: take those whole (set.update runs in C), a
    # long queue is mostly these
    groups: dict[tuple[str, str], list[str]] = {}
    accounted: set[str] = set()
    for order in plan.launches:
        served = [job for job in order.jobs if job not in accounted]
        groups.setdefault(("served", served_reason(order)), []).extend(served)
        accounted.update(served)
    for refusal in plan.refusals:
        refused = [job for job in refusal.jobs if job not in accounted]
        groups.setdefault(("refused", refusal.reason), []).extend(refused)
        accounted.update(refused)
    refused_templates = {r.template: r.reason for r in plan.refusals if not r.jobs}
    rest = view.pending
    if accounted:
        rest = list(compress(rest, map(not_, map(accounted.__contains__, map(JOB_ID, rest)))))
    Grouping(view, decision, refused_templates, groups).add(rest)
    arrays = {} if no_arrays(view.pending) else {j.job_id: j.array_tasks for j in view.pending}
    return [
        JobFate(
            status,
            reason,
            tuple(jobs),
            sum(arrays.get(job, 1) for job in jobs) if arrays else len(jobs),
        )
        for (status, reason), jobs in groups.items()
        if jobs
    ]


def served_reason(order: LaunchOrder) -> str:
    return f"waiting for {order.template} nodes {compress_hosts(order.nodes)}, launched for it"


def as_launched(plan: Plan, launched: Collection[str], failed: Mapping[str, str]) -> list[JobFate]:
    """The plan's fates once its launches ran: a job served by a launch that started none of
    its nodes (alternates included) waits with the failure's reason, and one that started
    some names the nodes that did, so no comment says "launched for it" of a launch that
    failed."""
    orders = {served_reason(order): order for order in plan.launches}
    fates = []
    for fate in plan.jobs:
        order = orders.get(fate.reason) if fate.status == "served" else None
        if order is None:
            fates.append(fate)
            continue
        tried = list(order.nodes) + [n for alt in order.alternates for n in alt.nodes]
        got = [n for n in tried if n in launched]
        why = next((failed[n] for n in order.nodes if n in failed), "")
        if not got:
            reason = f"launch failed, decided again next cycle: {why or 'no node started'}"
            fates.append(replace(fate, status="waiting", reason=reason))
        elif sorted(got) != sorted(order.nodes):
            short = len(order.nodes) - len(got)
            reason = f"waiting for nodes {compress_hosts(got)}, launched for it"
            if short > 0:
                reason += f" ({short} of {len(order.nodes)} failed: {why})"
            fates.append(replace(fate, reason=reason))
        else:
            fates.append(fate)
    return fates


@dataclass
class Grouping:
    """Pending jobs (none served or refused by name) into groups by fate, in queue order."""

    view: ClusterView
    decision: ScaleDecision
    refused_templates: dict[str, str]  # template -> why, for refusals naming no job
    groups: dict[tuple[str, str], list[str]]  # (status, reason) -> job ids

    def add(self, jobs: Sequence[PendingJob]) -> None:
        if not self.add_uniform(jobs):
            self.add_each(jobs)

    def add_each(self, jobs: Sequence[PendingJob]) -> None:
        fits: dict[int, tuple[list[TemplateView], str]] = {}  # by shape_key
        # a fitting job's fate follows from its shape, its Slurm reason and comment, unless
        # a policy held it: decided once per such kind of job (its group found once)
        kinds: dict[tuple[int, str, str], list[str]] = {}
        held, groups = self.decision.held, self.groups
        for job in jobs:
            shape = job.shape_key or shape_key(job)
            fit = fits.get(shape)
            if fit is None:
                fit = fits[shape] = fitting(job, self.view)
            templates, why = fit
            if not templates and not why:
                key = ("other", f"no template serves partition {job.partition}: Slurm's own nodes")
            elif not templates or (held and job.job_id in held):
                key = self.fate(job, templates, why)
            else:
                kind = (shape, job.reason, job.comment)
                group = kinds.get(kind)
                if group is None:
                    group = kinds[kind] = groups.setdefault(self.fate(job, templates, why), [])
                group.append(job.job_id)
                continue
            groups.setdefault(key, []).append(job.job_id)

    def add_uniform(self, jobs: Sequence[PendingJob]) -> bool:
        """`add_each`'s work when no job is held and every kind of job (shape, reason,
        comment) fits a template and has the same fate: all of `jobs` join that one group,
        in queue order, found with C-level passes over the queue. False when the queue is
        not like that (nothing is added then)."""
        if not jobs or self.decision.held:
            return False
        keys = shape_keys(jobs)
        fits = {key: fitting(jobs[keys.index(key)], self.view) for key in set(keys)}
        if not all(templates for templates, _ in fits.values()):
            return False
        # a job's fate follows from its shape's fit, its reason and its comment: a job of
        # each (reason, comment) the queue holds, judged against each shape's fit, says all
        reasons, comments = list(map(REASON, jobs)), list(map(COMMENT, jobs))
        if len(set(comments)) == 1:
            examples = [jobs[reasons.index(reason)] for reason in set(reasons)]
        else:
            pairs = list(zip(reasons, comments, strict=True))
            examples = [jobs[pairs.index(pair)] for pair in set(pairs)]
        if len(fits) * len(examples) > COMBINATIONS:
            return False
        fates = {self.fate(job, *fit) for fit in fits.values() for job in examples}
        if len(fates) != 1:
            return False
        self.groups.setdefault(fates.pop(), []).extend(map(JOB_ID, jobs))
        return True

    def fate(self, job: PendingJob, templates: list[TemplateView], why: str) -> tuple[str, str]:
        return fate(job, templates, why, self.decision, self.refused_templates)


def fitting(job: PendingJob, view: ClusterView) -> tuple[list[TemplateView], str]:
    """(the templates of the job's partitions it fits, why it fits none of them)."""
    serving = serving_templates(job, view.templates)
    reasons = [(t, why_not(job, t)) for t in serving]
    fit = [t for t, why in reasons if why is None]
    return fit, "" if fit else "; ".join(why for _, why in reasons if why)


def fate(
    job: PendingJob,
    templates: list[TemplateView],
    why: str,
    decision: ScaleDecision,
    refused_templates: dict[str, str],
) -> tuple[str, str]:
    if job.job_id in decision.held:
        return "held", decision.held[job.job_id]
    if not templates:
        return "unfit", decision.unfit.get(job.job_id, why)
    if job.reason.startswith(SLURM_HOLDS):
        return "held", f"{SLURM_SAYS}{job.reason}"
    refusal = next(
        (refused_templates[t.name] for t in templates if t.name in refused_templates), None
    )
    if refusal is not None:
        return "refused", refusal
    if not lacks_resources(job):
        return "waiting", f"{SLURM_SAYS}{job.reason}"
    names = ",".join(t.name for t in templates)
    return "waiting", f"on nodes of {names} that are up, coming or at their limit"

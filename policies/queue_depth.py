"""queue_depth: launch enough nodes for the jobs pending for lack of resources."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta
from itertools import compress

from clustermgr.policy import (
    ClusterView,
    Launch,
    NodeState,
    PendingJob,
    ReasonMemo,
    ScaleDecision,
    TemplateView,
    all_lack_resources,
    all_submitted_by,
    copies_per_node,
    job_ids,
    no_arrays,
    nodes_on,
    serving_templates,
    shape_key,
    shape_keys,
    sum_in_order,
    why_not,
)

ORDERS = ("price", "config")
Choices = dict[int, tuple[TemplateView | None, str, int, int]]
# per template: nodes needed, job ids in queue order; unfit job -> why; template -> why
# chosen; per all-or-nothing template, the jobs launched together (job id, its nodes)
Counted = tuple[
    dict[str, float],
    dict[str, list[str]],
    dict[str, str],
    dict[str, str],
    dict[str, list[tuple[str, int]]],
]


def job_price(job: PendingJob, template: TemplateView) -> float:
    """$/hour `job` keeps busy on `template`: its nodes there (a share when jobs like it
    share a node) at the template's own market and first type."""
    return template.hourly_price() * nodes_on(job, template) / copies_per_node(job, template)


def waste(job: PendingJob, template: TemplateView) -> float:
    """The share of the node's CPUs, GPUs and memory left unused by the copies of `job`
    it holds, averaged over the resources the node has (cluster-autoscaler's least-waste)."""
    copies = copies_per_node(job, template)
    gpus = job.gpus_total // max(nodes_on(job, template), 1) if job.gpus_total else 0
    shares = [
        (template.cpus, job.cpus_per_node),
        (template.memory_mb, job.memory_per_node_mb),
        (template.gpus, gpus),
    ]
    unused = [1 - min(copies * used, size) / size for size, used in shares if size > 0]
    return sum(unused) / len(unused) if unused else 0.0


class QueueDepth:
    """One node per pending node-share that fits a template, minus nodes already coming.

    Only jobs pending for lack of resources (Resources, Priority, node-related reasons)
    and older than `min_pending_s` count; a job that fits no template of its partition is
    listed in `unfit` with the reason and never launched for. Only "policy"-mode
    templates get launches here: in "slurm" mode Slurm resumes nodes itself and its
    resume requests are the demand.

    Of the templates a job fits, `template_order = "price"` (the default) takes the one
    that runs it cheapest per hour (its price times the nodes it keeps busy there), ties
    broken by least waste of CPUs, GPUs and memory, then config order (as cluster-
    autoscaler's `price` and `least-waste` expanders); `"config"` takes the first in the
    config's order (an admin's pinned order). A template another fitting one names in its
    `fallback_templates` is only ever that one's fallback, never a first choice.

    On a template whose scaling_strategy is all-or-nothing, each multi-node job gets a
    launch of its own (`together`: its nodes start together or none does); nodes coming or
    idle go to those jobs first, whole, in queue order. A node still coming that Slurm has
    already given a job is not coming for the pending ones.
    """

    name = "queue_depth"
    reads_start_estimates = False  # the simulator need not work them out for it

    def __init__(self, min_pending_s: float = 0.0, template_order: str = "price"):
        if template_order not in ORDERS:
            raise ValueError(f"template_order {template_order!r}: one of {', '.join(ORDERS)}")
        self.min_pending_s = float(min_pending_s)
        self.by_price = template_order == "price"

    def decide(self, view: ClusterView) -> ScaleDecision:
        decision = view.proposed
        choices: Choices = {}  # by the shape's number: an int hashes cheaper than a tuple
        reasons = ReasonMemo()
        counted = self.count_uniform(view, choices, reasons) or self.count(view, choices, reasons)
        slots, jobs, unfit, why_chosen, whole = counted
        launches = []
        for name in sorted(set(slots) | set(whole)):
            coming = view.coming_unclaimed(name)
            idle = sum(1 for n in view.burst_nodes(NodeState.UP, name) if n.idle)
            # a job launched together gets no node Slurm gave another job (MIXED either);
            # the jobs counted in slots may share one
            together = whole.get(name, [])
            shared = coming - view.coming_unclaimed(name, whole=True) if together else 0
            spare = coming - shared + idle + decision.launching(name)
            for job_id, needed in together:
                covered = min(spare, needed)
                spare -= covered
                if covered < needed:
                    launches.append(
                        Launch(
                            template=name,
                            count=needed - covered,
                            reason=f"queue_depth: job {job_id} needs {needed} nodes together, "
                            f"{covered} coming or idle" + why_chosen.get(name, ""),
                            jobs=(job_id,),
                            together=True,
                        )
                    )
            needed_slots = slots.get(name, 0.0)
            count = math.ceil(needed_slots - 1e-9) - spare - shared
            if jobs.get(name) and count > 0:
                launches.append(
                    Launch(
                        template=name,
                        count=count,
                        reason=f"queue_depth: {len(jobs[name])} pending jobs need "
                        f"{math.ceil(needed_slots)} nodes, {coming} coming, {idle} idle"
                        + why_chosen.get(name, ""),
                        jobs=tuple(jobs[name]),
                    )
                )
        return replace(decision.add(*launches), unfit={**decision.unfit, **unfit})

    def count(self, view: ClusterView, choices: Choices, reasons: ReasonMemo) -> Counted:
        """Per template, the nodes the counted jobs need and their ids in queue order; the
        jobs that fit no template, with why; why each template was chosen."""
        slots: dict[str, float] = defaultdict(float)
        jobs: dict[str, list[str]] = defaultdict(list)
        whole: dict[str, list[tuple[str, int]]] = defaultdict(list)  # job id, its nodes
        unfit: dict[str, str] = {}
        held = view.proposed.held
        why_chosen: dict[str, str] = {}  # template -> "; cheapest fit: ..." (its first job's)
        # submitted after this: younger than min_pending_s (a job with no submit time is 0 s old)
        young = view.now - timedelta(seconds=self.min_pending_s)
        known, no_submit_too_young = reasons.known, self.min_pending_s > 0
        for job in view.pending:  # the hot loop of a long queue: lookups, no calls
            if held and job.job_id in held:
                continue
            lacking = known.get(job.reason)
            if not (reasons.lacks_resources(job) if lacking is None else lacking):
                continue
            submitted = job.submit_time
            if (submitted > young) if submitted is not None else no_submit_too_young:
                continue
            shape = job.shape_key or shape_key(job)
            choice = choices.get(shape)
            if choice is None:
                choice = choices[shape] = self.choose_counted(job, view, self.by_price)
            template, why, nodes, copies = choice
            if template is not None and template.name not in why_chosen:
                why_chosen[template.name] = self.why_chosen(job, template, view, self.by_price)
            if why:
                unfit[job.job_id] = why
            if template is None:
                continue
            if template.all_or_nothing and nodes > 1 and job.array_tasks == 1:
                whole[template.name].append((job.job_id, nodes))  # launched together
                continue
            slots[template.name] += nodes * job.array_tasks / copies  # as nodes_for counts
            jobs[template.name].append(job.job_id)
        return slots, jobs, unfit, why_chosen, whole

    def count_uniform(
        self, view: ClusterView, choices: Choices, reasons: ReasonMemo
    ) -> Counted | None:
        """`count`'s answer when every pending job counts (none held or an array, each
        lacking resources and old enough) and every shape fits one and the same template,
        worked out per shape with C-level passes over the queue; None when the queue is not
        like that (then `count` walks it)."""
        pending = view.pending
        young = view.now - timedelta(seconds=self.min_pending_s)
        if not pending or view.proposed.held or not no_arrays(pending):
            return None
        if not all_lack_resources(pending, reasons):
            return None
        if not all_submitted_by(pending, young, unknown_ok=self.min_pending_s <= 0):
            return None
        keys = shape_keys(pending)
        firsts = {key: pending[keys.index(key)] for key in set(keys)}  # a job of each shape
        for key, job in firsts.items():
            if key not in choices:
                choices[key] = self.choose_counted(job, view, self.by_price)
        if any(choices[key][1] for key in firsts):
            return None  # some jobs fit no template: each is named in `unfit`
        chosen = {t.name: t for key in firsts if (t := choices[key][0]) is not None}
        if not chosen:
            return {}, {}, {}, {}, {}
        if len(chosen) > 1:
            return None
        (template,) = chosen.values()
        if template.all_or_nothing:
            return None  # its multi-node jobs are launched one by one: `count` sorts them
        nodes = {key: choices[key][2] / choices[key][3] for key in firsts if choices[key][0]}
        ids, first = job_ids(pending), pending[0]
        if len(nodes) < len(firsts):  # shapes that are not a cloud's business: not counted
            served = list(map(nodes.__contains__, keys))
            first = pending[served.index(True)]
            keys, ids = list(compress(keys, served)), list(compress(ids, served))
        why = self.why_chosen(first, template, view, self.by_price)
        return (
            {template.name: sum_in_order(keys, nodes)},
            {template.name: ids},
            {},
            {template.name: why},
            {},
        )

    @staticmethod
    def choose_counted(
        job: PendingJob, view: ClusterView, by_price: bool = True
    ) -> tuple[TemplateView | None, str, int, int]:
        """`choose`, with the nodes a task of the job takes there and how many share one."""
        template, why = QueueDepth.choose(job, view, by_price)
        if template is None:
            return None, why, 0, 1
        return template, why, nodes_on(job, template), copies_per_node(job, template)

    @staticmethod
    def choose(
        job: PendingJob, view: ClusterView, by_price: bool = True
    ) -> tuple[TemplateView | None, str]:
        """(the template to launch for the job or None, why it fits no template or "")."""
        templates = serving_templates(job, view.templates)
        if not templates:
            return None, ""  # not a cloud partition: on-prem business
        reasons = [(t, why_not(job, t)) for t in templates]
        fitting = [t for t, why in reasons if why is None]
        if not fitting:
            return None, "; ".join(why for _, why in reasons if why)
        # Slurm itself resumes nodes of "slurm"-mode templates: no launch from here
        policy_mode = [t for t in fitting if t.demand_mode == "policy"]
        # a protected template, or one whose region's director is not ready, launches
        # nothing: ask the next one (if all are, the refusal with the reason tells users
        # why their jobs wait)
        healthy = [t for t in policy_mode if not t.blocked] or policy_mode
        # an on-prem template with no powered-off node left to power on is no capacity: ask
        # the next one (a cloud) instead of waiting for nodes that are not there
        available = [t for t in healthy if not t.onprem or QueueDepth.bootable(t, view)]
        if by_price and len(available) > 1:
            # a template another one names as its fallback is that one's second choice (the
            # admin's order), never the first even when cheaper
            second = {name for t in available for name in t.fallbacks}
            available = [t for t in available if t.name not in second] or available
            available.sort(key=lambda t: (job_price(job, t), waste(job, t)))  # stable: config
        return (available[0] if available else None), ""

    @staticmethod
    def why_chosen(
        job: PendingJob, template: TemplateView, view: ClusterView, by_price: bool
    ) -> str:
        """What the reason says about the choice, when there was one to make."""
        others = [
            t
            for t in serving_templates(job, view.templates)
            if t.name != template.name and why_not(job, t) is None
        ]
        if not others:
            return ""
        if not by_price:
            return f"; config order: {template.name}, the first of {len(others) + 1} fitting"
        return (
            f"; cheapest fit: {template.name} ${job_price(job, template):.2f}/h, "
            f"{waste(job, template):.0%} waste (of {len(others) + 1} fitting)"
        )

    @staticmethod
    def bootable(template: TemplateView, view: ClusterView) -> bool:
        return len(view.free_slots(template.name)) > view.proposed.launching(template.name)

"""queue_depth: launch enough nodes for the jobs pending for lack of resources."""

from __future__ import annotations

import math
from collections import defaultdict

from clustermgr.lifecycle import NodeState
from clustermgr.policy.base import Launch, ScaleDecision
from clustermgr.scaling.fit import copies_per_node, lacks_resources, serving_templates, why_not
from clustermgr.scaling.view import ClusterView

COMING = (NodeState.REQUESTED, NodeState.LAUNCHING, NodeState.BOOTING)


class QueueDepth:
    """One node per pending node-share that fits a template, minus nodes already coming.

    Only jobs pending for lack of resources (Resources, Priority, node-related reasons)
    and older than `min_pending_s` count; a job that fits no template of its partition is
    listed in `unfit` with the reason and never launched for. Only "policy"-mode
    templates get launches here: in "slurm" mode Slurm resumes nodes itself and its
    resume requests are the demand.
    """

    name = "queue_depth"

    def __init__(self, min_pending_s: float = 0.0):
        self.min_pending_s = float(min_pending_s)

    def decide(self, view: ClusterView) -> ScaleDecision:
        decision = view.proposed
        slots: dict[str, float] = defaultdict(float)
        jobs: dict[str, list[str]] = defaultdict(list)
        unfit: dict[str, str] = {}
        for job in view.pending:
            templates = serving_templates(job, view.templates)
            if not templates or job.job_id in decision.held or not lacks_resources(job):
                continue
            if view.pending_age(job).total_seconds() < self.min_pending_s:
                continue
            reasons = [(t, why_not(job, t)) for t in templates]
            fitting = [t for t, why in reasons if why is None]
            if not fitting:
                unfit[job.job_id] = "; ".join(why for _, why in reasons if why)
                continue
            fitting = [t for t in fitting if t.demand_mode == "policy"]
            if not fitting:
                continue  # Slurm itself resumes nodes of "slurm"-mode templates
            template = fitting[0]
            per_node = copies_per_node(job, template)
            slots[template.name] += job.nodes * job.array_tasks / per_node
            jobs[template.name].append(job.job_id)
        launches = []
        for name, needed in sorted(slots.items()):
            coming = sum(len(view.burst_nodes(state, name)) for state in COMING)
            idle = sum(1 for n in view.burst_nodes(NodeState.UP, name) if n.idle)
            count = math.ceil(needed - 1e-9) - coming - idle - decision.launching(name)
            if count > 0:
                launches.append(
                    Launch(
                        template=name,
                        count=count,
                        reason=f"queue_depth: {len(jobs[name])} pending jobs need "
                        f"{math.ceil(needed)} nodes, {coming} coming, {idle} idle",
                        jobs=tuple(jobs[name]),
                    )
                )
        from dataclasses import replace

        return replace(decision.add(*launches), unfit={**decision.unfit, **unfit})

"""onprem_first: do not burst for a job on-prem nodes can serve soon."""

from __future__ import annotations

import math
from datetime import timedelta

from clustermgr.policy import (
    ClusterView,
    Launch,
    NodeState,
    PendingJob,
    ScaleDecision,
    TemplateView,
    lacks_resources,
    nodes_for,
    serving_templates,
    why_not,
)

COMING = (NodeState.REQUESTED, NodeState.LAUNCHING, NodeState.BOOTING)


class OnpremFirst:
    """Hold jobs that on-prem nodes will serve within `minutes`, so no cloud node is bought.

    - A job whose backfill start estimate is within `minutes` from now (Slurm expects
      on-prem nodes to free up for it) is held.
    - A job that fits an on-prem template (ipmi/redfish provider) with powered-off nodes
      whose boot timeout is within `minutes` gets those nodes powered on (a launch of that
      template) and is held; nodes of the template already powering on serve jobs first.
    - An on-prem template with fewer than `min_on` nodes on (an admin or a failure switched
      them off; idle_timeout never does) gets powered-off nodes powered on up to `min_on`.

    Put it before queue_depth: held jobs are not counted as demand. A job with no
    estimate (Slurm has none for it) and no on-prem node to boot is not held.
    """

    name = "onprem_first"

    def __init__(self, minutes: float = 15.0):
        self.window = timedelta(minutes=float(minutes))

    def decide(self, view: ClusterView) -> ScaleDecision:
        soon = view.now + self.window
        held = {
            job.job_id: f"onprem_first: Slurm expects it to start at {job.estimated_start:%H:%M}"
            for job in view.pending
            if job.estimated_start is not None and job.estimated_start <= soon
        }
        decision = view.proposed.hold(held)
        return self.keep_min_on(view, self.power_on(view, decision))

    @staticmethod
    def keep_min_on(view: ClusterView, decision: ScaleDecision) -> ScaleDecision:
        orders = []
        for t in view.templates.values():
            if not t.onprem or not t.min_on or t.demand_mode != "policy" or t.blocked:
                continue
            planned = view.powered_on(t.name) + decision.launching(t.name)
            free = len(view.free_slots(t.name)) - decision.launching(t.name)
            count = min(t.min_on - planned, free)
            if count > 0:
                reason = f"onprem_first: keep {t.min_on} {t.name} nodes on (min_on)"
                orders.append(Launch(template=t.name, count=count, reason=reason))
        return decision.add(*orders)

    def power_on(self, view: ClusterView, decision: ScaleDecision) -> ScaleDecision:
        bootable = [
            t
            for t in view.templates.values()
            if t.onprem
            and t.demand_mode == "policy"
            and not t.blocked
            and t.boot_timeout_s <= self.window.total_seconds()
        ]
        if not bootable:
            return decision  # no on-prem template (cloud only): nothing changes
        coming = {
            t.name: sum(len(view.burst_nodes(state, t.name)) for state in COMING)
            - decision.launching(t.name)
            for t in bootable
        }
        free = {t.name: len(view.free_slots(t.name)) - decision.launching(t.name) for t in bootable}
        launches: dict[str, list[str]] = {}
        held: dict[str, str] = {}
        for job in view.pending:
            if job.job_id in decision.held or not lacks_resources(job):
                continue
            for template in self.fitting(job, bootable):
                needed = self.nodes_needed(job, template)
                if coming[template.name] >= needed:
                    coming[template.name] -= needed
                    held[job.job_id] = f"onprem_first: on-prem {template.name} nodes power on"
                    break
                if free[template.name] >= needed:
                    free[template.name] -= needed
                    launches.setdefault(template.name, []).extend([job.job_id] * needed)
                    held[job.job_id] = f"onprem_first: powering on {template.name} nodes"
                    break
        orders = [
            Launch(
                template=name,
                count=len(jobs),
                reason=f"onprem_first: {len(set(jobs))} pending jobs fit powered-off "
                f"on-prem nodes that boot within {self.window.total_seconds() / 60:.0f} min",
                jobs=tuple(dict.fromkeys(jobs)),
            )
            for name, jobs in sorted(launches.items())
        ]
        return decision.add(*orders).hold(held)

    @staticmethod
    def fitting(job: PendingJob, templates: list[TemplateView]) -> list[TemplateView]:
        serving = serving_templates(job, {t.name: t for t in templates})
        return [t for t in serving if why_not(job, t) is None]

    @staticmethod
    def nodes_needed(job: PendingJob, template: TemplateView) -> int:
        return math.ceil(nodes_for(job, template) - 1e-9)

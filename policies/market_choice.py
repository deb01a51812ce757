"""market_choice: spot or on-demand per job, where a template pair offers both markets."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from clustermgr.policy import (
    ClusterView,
    Launch,
    MarketChoice,
    NodeState,
    PendingJob,
    ScaleDecision,
    TemplateView,
    nodes_for,
    nodes_on,
    why_not,
)


@dataclass(frozen=True)
class Verdict:
    spot: bool
    loss: float  # $ a reclaim is expected to cost the job on spot (rework and reboots)
    saving: float  # $ spot saves over on-demand if nothing is reclaimed
    why: str


class MarketPerJob:
    """Move each job of a launch to the spot or the on-demand template of a pair.

    A pair is a spot template and an on-demand template of the same partition and shape
    (CPUs, memory, GPUs and their model). A job goes on spot only when its expected loss
    there is smaller than what spot saves: a job of `w` nodes running `r` hours, each node
    reclaimed at `reclaim_per_hour`, restarts at each reclaim of any of its nodes, so it
    is expected to pay `(e^(l*w*r) - 1) / l` node-hours plus a boot per reclaim, where the
    work is `w*r`; the loss is the excess at the spot price, the saving `w*r` times the
    price difference. `r` is the job's time limit (`default_job_hours` without one). A job
    that cannot be requeued ends at a reclaim instead of restarting: on-demand.

    Put it after the demand policies (queue_depth), before spot_fallback and budget_cap.
    """

    name = "market_choice"
    reads_start_estimates = False  # the simulator need not work them out for it

    def __init__(self, reclaim_per_hour: float = 0.01, default_job_hours: float = 1.0):
        if reclaim_per_hour < 0:
            raise ValueError(f"reclaim_per_hour {reclaim_per_hour!r} is negative")
        self.rate = float(reclaim_per_hour)
        self.default_job_hours = float(default_job_hours)

    def decide(self, view: ClusterView) -> ScaleDecision:
        decision = view.proposed
        for spot, on_demand in pairs(view):
            decision = self.split(view, decision, spot, on_demand)
        return decision

    def split(
        self, view: ClusterView, decision: ScaleDecision, spot: TemplateView, od: TemplateView
    ) -> ScaleDecision:
        names = (spot.name, od.name)
        # launches for named slots (Slurm's resume requests) or for no job stay as they are
        ours = [x for x in decision.launches if x.template in names and x.jobs and not x.nodes]
        if not ours:
            return decision
        pending = {job.job_id: job for job in view.pending}
        chosen: dict[str, list[tuple[PendingJob, Verdict]]] = {spot.name: [], od.name: []}
        memo: dict[tuple[object, ...], Verdict] = {}
        for launch in ours:
            for job_id in launch.jobs:
                job = pending.get(job_id)
                if job is None:
                    continue
                key = (job.shape_memo, job.nodes, job.time_limit_min, job.requeue)
                verdict = memo.get(key) if job.shape_memo is not None else None
                if verdict is None:
                    verdict = memo[key] = self.verdict(job, spot, od)
                target = spot if verdict.spot else od
                if why_not(job, target) is not None:
                    target = view.templates[launch.template]  # fits only where it was
                chosen[target.name].append((job, verdict))
        others = [x for x in decision.launches if x not in ours]
        made = [self.launch(view, t, chosen[t.name], others) for t in (spot, od)]
        return replace(decision, launches=tuple(others + [x for x in made if x is not None]))

    def launch(
        self,
        view: ClusterView,
        template: TemplateView,
        jobs: list[tuple[PendingJob, Verdict]],
        others: list[Launch],
    ) -> Launch | None:
        """The nodes `jobs` need on `template`, less those up idle, coming or launched."""
        if not jobs:
            return None
        needed = sum(nodes_for(job, template) for job, _ in jobs)
        coming = view.coming_unclaimed(template.name)
        idle = sum(1 for n in view.burst_nodes(NodeState.UP, template.name) if n.idle)
        launched = sum(x.count for x in others if x.template == template.name)
        count = math.ceil(needed - 1e-9) - coming - idle - launched
        if count <= 0:
            return None
        market: MarketChoice = "spot" if template.market == "spot" else "on-demand"
        example = jobs[0][1]  # the first in queue order speaks for the launch
        reason = (
            f"market_choice: {len(jobs)} pending jobs need {math.ceil(needed - 1e-9)} "
            f"{template.name} nodes, {coming} coming, {idle} idle; {market}: {example.why}"
        )
        return Launch(template.name, count, reason, market, tuple(job.job_id for job, _ in jobs))

    def verdict(self, job: PendingJob, spot: TemplateView, od: TemplateView) -> Verdict:
        width = nodes_on(job, spot)
        hours = job.time_limit_min / 60 if job.time_limit_min else self.default_job_hours
        spot_price, od_price = spot.hourly_price(), od.hourly_price()
        work = width * hours * job.array_tasks
        saving = work * (od_price - spot_price)
        if not job.requeue:
            why = f"job {job.job_id} cannot be requeued (a reclaim would end it)"
            return Verdict(False, math.inf, saving, why)
        loss = self.expected_loss(width, hours, spot.boot_timeout_s / 3600) * job.array_tasks
        loss *= spot_price
        if loss < saving:
            why = f"expected loss ${loss:.2f} < saving ${saving:.2f} (job {job.job_id})"
            return Verdict(True, loss, saving, why)
        why = f"expected loss ${loss:.2f} >= saving ${saving:.2f} on spot (job {job.job_id})"
        return Verdict(False, loss, saving, why)

    def expected_loss(self, width: int, hours: float, boot_h: float) -> float:
        """Node-hours a job of `width` nodes and `hours` of work is expected to pay on spot
        beyond its work: the rework after reclaims, and a boot per reclaim."""
        if self.rate <= 0 or hours <= 0:
            return 0.0
        exponent = min(self.rate * width * hours, 50.0)  # past e^50 it is never worth it
        reclaims = math.expm1(exponent)
        return reclaims / self.rate - width * hours + reclaims * boot_h


def pairs(view: ClusterView) -> list[tuple[TemplateView, TemplateView]]:
    """(spot, on-demand) templates of one partition and shape that launch from here."""
    usable = [
        t
        for t in view.templates.values()
        if t.demand_mode == "policy" and not t.onprem and not t.blocked
    ]
    found = []
    for spot in (t for t in usable if t.market == "spot"):
        for od in (t for t in usable if t.market != "spot"):
            if same_shape(spot, od):
                found.append((spot, od))
                break
    return found


def same_shape(a: TemplateView, b: TemplateView) -> bool:
    return (a.partition, a.cpus, a.memory_mb, a.gpus, a.gpu_model) == (
        b.partition,
        b.cpus,
        b.memory_mb,
        b.gpus,
        b.gpu_model,
    )

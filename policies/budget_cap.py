"""budget_cap: never commit more than $/hour or $/month to burst nodes."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime

from clustermgr.policy import ClusterView, Launch, Refusal, ScaleDecision, nodes_for


class BudgetCap:
    """Trim launches so the hourly rate and the month's committed cost stay under the caps.

    Committed cost counts what is already spent this month, plus every running node until
    the end of its jobs' time limits, plus each new node for the time limit of the jobs it
    is launched for (`default_job_hours` when unknown).
    """

    name = "budget_cap"
    reads_start_estimates = False  # the simulator need not work them out for it

    def __init__(
        self,
        hourly: float | None = None,
        monthly: float | None = None,
        default_job_hours: float = 1.0,
    ):
        self.hourly = hourly
        self.monthly = monthly
        self.default_job_hours = float(default_job_hours)

    def committed(self, view: ClusterView) -> float:
        start = month_start(view.now)
        total = view.month_spend
        for node in view.active_nodes():
            template = view.templates.get(node.template or "")
            if template is None:
                continue
            price = template.hourly_price(node.market, node.instance_type)
            since = max(node.launched_at or view.now, start)
            until = max(node.jobs_end or view.now, view.now)
            total += price * (until - since).total_seconds() / 3600
        return total

    def decide(self, view: ClusterView) -> ScaleDecision:
        decision = view.proposed
        rate = view.hourly_rate()
        committed = self.committed(view) if self.monthly is not None else 0.0
        limits = {j.job_id: j.time_limit_min for j in view.pending}
        kept, refusals = [], []
        for launch in decision.launches:
            # the dearest of its alternates: a capacity fallback stays under the caps too
            price = view.launch_price(launch.template, launch.market)
            minutes = [limits.get(job) for job in launch.jobs]
            hours = max((m / 60 for m in minutes if m), default=self.default_job_hours)
            allowed = launch.count
            if price > 0 and self.hourly is not None:
                allowed = min(allowed, max(0, math.floor((self.hourly - rate) / price + 1e-9)))
            if price > 0 and self.monthly is not None:
                room = (self.monthly - committed) / (price * hours)
                allowed = min(allowed, max(0, math.floor(room + 1e-9)))
            allowed = whole_jobs(view, launch, allowed)
            if allowed < launch.count:
                refusals.append(
                    Refusal(
                        launch.template,
                        f"budget_cap: {launch.count - allowed} of {launch.count} nodes refused "
                        f"({self._caps()}; now ${rate:.2f}/h, ${committed:.2f} committed)",
                        launch.jobs,
                    )
                )
            if allowed > 0:
                kept.append(replace(launch, count=allowed))
            rate += allowed * price
            committed += allowed * price * hours
        return replace(decision, launches=tuple(kept)).refuse(*refusals)

    def _caps(self) -> str:
        caps = []
        if self.hourly is not None:
            caps.append(f"cap ${self.hourly:.2f}/h")
        if self.monthly is not None:
            caps.append(f"cap ${self.monthly:.2f}/month")
        return ", ".join(caps)


def whole_jobs(view: ClusterView, launch: Launch, allowed: int) -> int:
    """Cut `allowed` down to nodes that finish whole jobs: half the nodes of a wide job
    would only idle, paid, until the rest could be afforded. Jobs are taken in queue
    order, skipping those that do not fit (smaller ones after them may)."""
    if allowed >= launch.count or not launch.jobs:
        return allowed
    template = view.templates[launch.template]
    pending = {job.job_id: job for job in view.pending}
    needs = [
        nodes_for(job, template)
        for job in (pending.get(job_id) for job_id in launch.jobs)
        if job is not None
    ]
    # nodes already up or coming serve the first jobs: the launch covers the rest
    covered = max(0, math.ceil(sum(needs) - 1e-9) - launch.count)
    served = 0.0
    for need in needs:
        if served + need <= covered + allowed + 1e-9:
            served += need
    return max(0, min(allowed, math.ceil(served - 1e-9) - covered))


def month_start(now: datetime) -> datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)

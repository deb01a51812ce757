"""What one replay measured, and the figures an admin compares strategies by.

Used node-hours count a job's dominant share of each node it ran on (a whole-node job: 1;
a pod with 2 of a node's 8 GPUs: 0.25), so GPU-sharing traces are not over-counted. Work a
spot reclaim threw away is paid and counted as lost, not used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from clustermgr.sim.model import Shape, SimJob

BOUNDED_SLOWDOWN_FLOOR_S = 10.0  # the usual threshold (Feitelson): very short jobs count as 10 s


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    onprem_busy: int
    cloud_active: int
    queued: int
    cost: float


@dataclass
class Outcome:
    """Running totals of one replay; `figures()` turns them into the reported numbers."""

    strategy: str
    jobs: int = 0
    unrunnable: int = 0
    never_started: int = 0
    onprem_nodes: int = 0
    end_s: float = 0.0
    paid_node_s: float = 0.0
    cost: float = 0.0
    cloud_used_node_s: float = 0.0
    onprem_used_node_s: float = 0.0
    lost_node_s: float = 0.0
    launches: int = 0
    reclaims: int = 0
    capacity_failures: int = 0  # nodes the simulated cloud had no capacity for
    requeues: int = 0
    cloud_jobs: int = 0
    policy_errors: int = 0
    last_policy_error: str | None = None
    onprem_off_node_s: float = 0.0
    onprem_power_ons: int = 0
    onprem_idle_kw: float = 0.0
    waits: list[float] = field(default_factory=list)
    slowdowns: list[float] = field(default_factory=list)
    first_submit_s: float | None = None
    timeline: list[Sample] = field(default_factory=list)
    _month_cost: dict[tuple[int, int], float] = field(default_factory=dict)

    def finish(self, job: SimJob, cloud: bool, shape: Shape) -> None:
        assert job.first_start is not None and job.end is not None
        used = job.run_s * job.nodes * share(job, shape)
        if cloud:
            self.cloud_used_node_s += used
            self.cloud_jobs += 1
        else:
            self.onprem_used_node_s += used
        self.lost_node_s += job.lost_node_s
        self.waits.append(job.first_start - job.submit)
        response = job.end - job.submit
        self.slowdowns.append(max(1.0, response / max(job.run_s, BOUNDED_SLOWDOWN_FLOOR_S)))
        if self.first_submit_s is None or job.submit < self.first_submit_s:
            self.first_submit_s = job.submit

    def pay(self, paid_s: float, cost: float, when: datetime) -> None:
        self.paid_node_s += paid_s
        self.cost += cost
        key = (when.year, when.month)
        self._month_cost[key] = self._month_cost.get(key, 0.0) + cost

    def clear_bill(self) -> None:
        """Forget what was paid (a baseline that pays its own way then pays again)."""
        self.paid_node_s = self.cost = 0.0
        self._month_cost.clear()

    def month_spend(self, now: datetime) -> float:
        return self._month_cost.get((now.year, now.month), 0.0)

    def figures(self) -> Figures:
        waits = sorted(self.waits)
        span = max(self.end_s - (self.first_submit_s or 0.0), 1.0)
        paid_h = self.paid_node_s / 3600
        used_h = self.cloud_used_node_s / 3600
        return Figures(
            strategy=self.strategy,
            jobs=self.jobs,
            completed=len(self.waits),
            never_started=self.never_started,
            unrunnable=self.unrunnable,
            cloud_jobs=self.cloud_jobs,
            paid_node_hours=paid_h,
            cost=self.cost,
            used_node_hours=used_h,
            idle_paid_node_hours=max(0.0, paid_h - used_h),
            lost_node_hours=self.lost_node_s / 3600,
            paid_per_used=paid_h / used_h if used_h else None,
            wait_mean_s=sum(waits) / len(waits) if waits else 0.0,
            wait_median_s=quantile(waits, 0.5),
            wait_p95_s=quantile(waits, 0.95),
            bounded_slowdown=sum(self.slowdowns) / len(self.slowdowns) if self.slowdowns else 0.0,
            onprem_utilisation=(
                self.onprem_used_node_s / (self.onprem_nodes * span) if self.onprem_nodes else 0.0
            ),
            cloud_utilisation=used_h / paid_h if paid_h else None,
            launches=self.launches,
            reclaims=self.reclaims,
            capacity_failures=self.capacity_failures,
            requeues=self.requeues,
            policy_errors=self.policy_errors,
            last_policy_error=self.last_policy_error,
            span_days=span / 86400,
            onprem_off_node_hours=self.onprem_off_node_s / 3600,
            onprem_power_ons=self.onprem_power_ons,
            energy_saved_kwh=self.onprem_off_node_s / 3600 * self.onprem_idle_kw,
        )


@dataclass(frozen=True)
class Figures:
    strategy: str
    jobs: int
    completed: int
    never_started: int
    unrunnable: int
    cloud_jobs: int
    paid_node_hours: float
    cost: float
    used_node_hours: float
    idle_paid_node_hours: float
    lost_node_hours: float
    paid_per_used: float | None
    wait_mean_s: float
    wait_median_s: float
    wait_p95_s: float
    bounded_slowdown: float
    onprem_utilisation: float
    cloud_utilisation: float | None
    launches: int
    reclaims: int
    capacity_failures: int
    requeues: int
    policy_errors: int
    last_policy_error: str | None
    span_days: float
    onprem_off_node_hours: float
    onprem_power_ons: int
    energy_saved_kwh: float

    def as_json(self) -> dict[str, Any]:
        return {
            key: (round(value, 4) if isinstance(value, float) else value)
            for key, value in asdict(self).items()
        }


def share(job: SimJob, shape: Shape) -> float:
    """The job's dominant share of one node (1.0 for a whole-node job)."""
    if job.cpus == 0:
        return 1.0
    parts = [job.cpus / shape.cpus]
    if shape.gpus:
        parts.append(job.gpus / shape.gpus)
    if shape.memory_mb:
        parts.append(job.memory_mb / shape.memory_mb)
    return min(1.0, max(parts))


def quantile(ordered: list[float], q: float) -> float:
    """Nearest-rank quantile of an already sorted list (0.0 for none)."""
    if not ordered:
        return 0.0
    rank = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[rank]


def readable_duration(seconds: float) -> str:
    """`45 s`, `12.5 min` or `3.2 h`: a wait as a person reads it."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"

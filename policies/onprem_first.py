"""onprem_first: do not burst for a job on-prem nodes can serve soon."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from clustermgr.policy import (
    ClusterView,
    Launch,
    NodeState,
    PendingJob,
    RunEstimate,
    RunningJob,
    ScaleDecision,
    TemplateView,
    lacks_resources,
    nodes_for,
    serving_templates,
    why_not,
)

COMING = (NodeState.REQUESTED, NodeState.LAUNCHING, NodeState.BOOTING)
# Slurm's backfill plans starts on a grid of this many seconds (bf_resolution's default):
# an estimate this close after a running job's limit end is that job's end
SLURM_RESOLUTION_S = 60.0


class OnpremFirst:
    """Hold jobs that on-prem nodes will serve within `minutes`, so no cloud node is bought.

    - A job whose backfill start estimate is within `minutes` from now (Slurm expects
      on-prem nodes to free up for it) is held. Slurm's estimate believes the running
      jobs' time limits; with `history` (the default) a later estimate is moved to when the
      site's own history says those jobs end (`view.run_history`: the `quantile` of the
      recent run/limit ratios of each job's user and shape, else its shape, else its
      limit), and the job is held if that is within `minutes`. An estimate that waits for
      no running job's end (a job not started yet, a reservation) is left as it is.
    - A job that fits an on-prem template (ipmi/redfish provider) with powered-off nodes
      whose boot timeout is within `minutes` gets those nodes powered on (a launch of that
      template) and is held; nodes of the template already powering on serve jobs first.
    - An on-prem template with fewer than `min_on` nodes on (an admin or a failure switched
      them off; idle_timeout never does) gets powered-off nodes powered on up to `min_on`.

    Put it before queue_depth: held jobs are not counted as demand. A job with no
    estimate (Slurm has none for it) and no on-prem node to boot is not held.
    """

    name = "onprem_first"

    def __init__(self, minutes: float = 15.0, history: bool = True, quantile: float = 0.9):
        self.window = timedelta(minutes=float(minutes))
        self.history = bool(history)
        self.quantile = float(quantile)
        if not 0 < self.quantile <= 1:
            raise ValueError(f"onprem_first: quantile {quantile} is not in (0, 1]")

    def decide(self, view: ClusterView) -> ScaleDecision:
        soon = view.now + self.window
        held: dict[str, str] = {}
        ends: ExpectedEnds | None = None
        for job in view.pending:
            slurm = job.estimated_start
            if slurm is None:
                continue
            if slurm <= soon:
                held[job.job_id] = f"onprem_first: Slurm expects it to start at {slurm:%H:%M}"
                continue
            if not self.history or not view.run_history.recorded:
                continue  # no run learned yet: nothing moves Slurm's estimates
            ends = ends or ExpectedEnds(view, self.quantile)
            expected = ends.start(slurm, view.now)
            if expected is not None and expected.at <= soon:
                held[job.job_id] = expected.reason(slurm)
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


@dataclass(frozen=True)
class ExpectedStart:
    at: datetime  # when the running jobs Slurm waits for have ended, by the site's history
    waits_for: int  # how many running jobs Slurm expects to end by its estimate
    last: RunningJob  # the one of them expected to end last
    by: RunEstimate  # what says when it ends

    def reason(self, slurm: datetime) -> str:
        jobs = f"the {self.waits_for} running jobs" if self.waits_for > 1 else "the running job"
        return (
            f"onprem_first: expected to start by {self.at:%H:%M}, not {slurm:%H:%M} as "
            f"Slurm's time limits say: {jobs} it waits for end by then by the site's "
            f"history (the last, job {self.last.job_id}, by {self.by.describe()})"
        )


class ExpectedEnds:
    """The running jobs in the order their time limits end them (what Slurm's estimates are
    made of), each with when it ends by the site's run-time history."""

    def __init__(self, view: ClusterView, quantile: float):
        rows = sorted(
            (
                (job.end_time, *expected_end(view, job, quantile), job)
                for job in view.running
                if job.end_time is not None
            ),
            key=lambda row: row[0],
        )
        self.limit_ends = [row[0] for row in rows]
        # for the first i+1 jobs: the latest expected end among them, with its job
        self.latest: list[tuple[datetime, RunEstimate, RunningJob]] = []
        for _, end, by, job in rows:
            if not self.latest or end > self.latest[-1][0]:
                self.latest.append((end, by, job))
            else:
                self.latest.append(self.latest[-1])

    def start(self, slurm: datetime, now: datetime) -> ExpectedStart | None:
        """When a job Slurm expects to start at `slurm` should start: once every running job
        whose limit ends by then has ended by history (late rather than early: it may need
        fewer of them). None when `slurm` is no running job's end (it waits for another)."""
        count = bisect.bisect_right(self.limit_ends, slurm)
        if not count or self.limit_ends[count - 1] < slurm - timedelta(seconds=SLURM_RESOLUTION_S):
            return None
        end, by, job = self.latest[count - 1]
        return ExpectedStart(max(now, end), count, job, by)


def expected_end(
    view: ClusterView, job: RunningJob, quantile: float
) -> tuple[datetime, RunEstimate]:
    """When `job` ends by the site's history, and by which estimate: its limit's end when it
    has no start, limit or shape to go by, or has already run longer than history says."""
    assert job.end_time is not None
    if job.start_time is None or not job.time_limit_s or job.shape is None:
        return job.end_time, RunEstimate(0.0, "unknown")
    by = view.run_history.estimate(job.user, job.shape, job.time_limit_s, quantile)
    end = min(job.start_time + timedelta(seconds=by.seconds), job.end_time)
    if by.runs and end <= view.now:
        return job.end_time, by.outlived(job.time_limit_s)
    return end, by

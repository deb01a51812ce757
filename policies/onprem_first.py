"""onprem_first: do not burst for a job Slurm expects to start on-prem soon."""

from __future__ import annotations

from datetime import timedelta

from clustermgr.policy import ClusterView, ScaleDecision


class OnpremFirst:
    """Hold jobs whose backfill start estimate is within `minutes` from now.

    Put it before queue_depth: held jobs are not counted as demand. A job with no
    estimate (Slurm has none for it) is not held.
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
        return view.proposed.hold(held)

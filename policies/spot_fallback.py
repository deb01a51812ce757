"""spot_fallback: spot first; on-demand after a spot capacity failure or a long wait."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from clustermgr.policy import ClusterView, Launch, ScaleDecision


class SpotFallback:
    """For spot templates: launch spot, unless spot capacity failed for the template in the
    last `remember_min` minutes or the jobs launched for waited `wait_min` or more."""

    name = "spot_fallback"
    reads_start_estimates = False  # the simulator need not work them out for it

    def __init__(self, wait_min: float = 10.0, remember_min: float = 30.0):
        self.wait = timedelta(minutes=float(wait_min))
        self.remember = timedelta(minutes=float(remember_min))

    def decide(self, view: ClusterView) -> ScaleDecision:
        submitted = {j.job_id: j.submit_time for j in view.pending}
        launches = [self._choose(view, launch, submitted) for launch in view.proposed.launches]
        return replace(view.proposed, launches=tuple(launches))

    def _choose(
        self, view: ClusterView, launch: Launch, submitted: Mapping[str, datetime | None]
    ) -> Launch:
        template = view.templates[launch.template]
        if template.market != "spot" or launch.market == "on-demand":
            return launch
        failed = [
            f
            for f in view.failures
            if f.template == launch.template
            and f.market == "spot"
            and f.kind == "CAPACITY"
            and view.now - f.at <= self.remember
        ]
        if failed:
            return replace(
                launch,
                market="on-demand",
                reason=f"{launch.reason}; spot_fallback: no spot capacity",
            )
        oldest = min(
            (t for j in launch.jobs if (t := submitted.get(j)) is not None),
            default=None,
        )
        if oldest is not None and view.now - oldest >= self.wait:
            return replace(
                launch,
                market="on-demand",
                reason=f"{launch.reason}; spot_fallback: waited too long",
            )
        return replace(launch, market="spot")

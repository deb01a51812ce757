"""min_max: keep at least `min` nodes of a template up (warm), never more than `max`."""

from __future__ import annotations

from dataclasses import replace

from clustermgr.policy import ClusterView, Launch, Refusal, ScaleDecision


class MinMax:
    """Bounds for one template: launch up to `min` warm nodes, trim launches above `max`.

    Put it after the demand policies (and after idle_timeout, whose stops it can undo to
    keep the warm floor).
    """

    name = "min_max"
    reads_start_estimates = False  # the simulator need not work them out for it

    def __init__(self, template: str, min: int = 0, max: int | None = None):
        self.template = template
        self.min = int(min)
        self.max = None if max is None else int(max)

    def decide(self, view: ClusterView) -> ScaleDecision:
        decision = view.proposed
        active = len(view.active_nodes(self.template))
        stopping = [s for s in decision.stops if view.nodes[s.node].template == self.template]
        keep = max(0, self.min - (active - len(stopping)))
        if keep:
            spared = {s.node for s in stopping[:keep]}
            decision = replace(
                decision, stops=tuple(s for s in decision.stops if s.node not in spared)
            )
            decision = decision.note(f"min_max: kept {len(spared)} nodes of {self.template} warm")
        planned = active + decision.launching(self.template)
        if planned < self.min:
            decision = decision.add(
                Launch(self.template, self.min - planned, f"min_max: keep {self.min} warm")
            )
        if self.max is not None and planned > self.max:
            decision = self._trim(decision, planned - self.max)
        return decision

    def _trim(self, decision: ScaleDecision, excess: int) -> ScaleDecision:
        launches = []
        for launch in reversed(decision.launches):
            if launch.template == self.template and excess > 0:
                cut = min(excess, launch.count)
                excess -= cut
                if launch.count - cut > 0:
                    launches.append(replace(launch, count=launch.count - cut))
            else:
                launches.append(launch)
        launches.reverse()
        refusal = Refusal(self.template, f"min_max: at most {self.max} nodes of {self.template}")
        return replace(decision, launches=tuple(launches)).refuse(refusal)

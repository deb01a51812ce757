"""What a policy returns: a ScaleDecision of launches, stops, refusals, held and unfit jobs.

Policies run as an ordered chain. Each one sees, in `view.proposed`, the decision the
policies before it produced, and returns the decision as it wants it: add launches (demand),
trim them (limits, budgets), change their market (spot fallback), or add stops (idle).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

MarketChoice = Literal["spot", "on-demand"] | None


@dataclass(frozen=True)
class Launch:
    """Start `count` nodes of `template` (None market: the template's own)."""

    template: str
    count: int
    reason: str
    market: MarketChoice = None
    jobs: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()  # specific slots (Slurm's resume requests); else any free ones
    # the nodes serve one job and are no use apart (a multi-node job): on a template whose
    # scaling_strategy is all-or-nothing they are launched together or not at all
    together: bool = False


@dataclass(frozen=True)
class Stop:
    node: str
    reason: str


@dataclass(frozen=True)
class Refusal:
    """A template's demand that a policy refused (budget, wait for on-prem): shown to users."""

    template: str
    reason: str
    jobs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScaleDecision:
    launches: tuple[Launch, ...] = ()
    stops: tuple[Stop, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    unfit: Mapping[str, str] = field(default_factory=dict)  # job id -> why it fits no template
    held: Mapping[str, str] = field(default_factory=dict)  # job id -> why not to burst for it
    notes: tuple[str, ...] = ()

    def launching(self, template: str | None = None) -> int:
        return sum(x.count for x in self.launches if template in (None, x.template))

    def add(self, *launches: Launch) -> ScaleDecision:
        return replace(self, launches=self.launches + tuple(launches))

    def stop(self, *stops: Stop) -> ScaleDecision:
        known = {s.node for s in self.stops}
        return replace(self, stops=self.stops + tuple(s for s in stops if s.node not in known))

    def refuse(self, *refusals: Refusal) -> ScaleDecision:
        return replace(self, refusals=self.refusals + tuple(refusals))

    def hold(self, reasons: Mapping[str, str]) -> ScaleDecision:
        return replace(self, held={**self.held, **reasons})

    def note(self, *notes: str) -> ScaleDecision:
        return replace(self, notes=self.notes + tuple(notes))

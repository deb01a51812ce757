"""Money in one place: one price type, one billing rule, one cost function.

Act (closing a run's cost), the daemon's metrics and heartbeat, the ClusterView policies
read, `clustermgr status` and the catalog all price through here, so a change to a billing
rule cannot make the dashboard and the budget policy disagree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    """$/hour of one instance type; spot None when the type has no spot price."""

    on_demand: float | None
    spot: float | None = None

    def hourly(self, market: str | None) -> float:
        """The market's price (on-demand when spot is unpriced); 0.0 when nothing is set."""
        if market == "spot" and self.spot is not None:
            return self.spot
        return self.on_demand or 0.0


@dataclass(frozen=True)
class BillingRule:
    """Charged per `increment_s` seconds, at least `minimum_s` per run."""

    increment_s: int = 1
    minimum_s: int = 60

    def billed_seconds(self, run_seconds: float) -> float:
        charged = math.ceil(max(run_seconds, 0.0) / self.increment_s) * self.increment_s
        return float(max(charged, self.minimum_s))

    def cost(self, hourly_price: float, run_seconds: float) -> float:
        """$ for one run of `run_seconds` at `hourly_price`."""
        return hourly_price * self.billed_seconds(run_seconds) / 3600.0

    def paid_until(self, run_seconds: float) -> float:
        """Seconds into the run up to which the time is already paid for."""
        return self.billed_seconds(run_seconds)


def price_of(
    prices: Mapping[str, Price],
    instance_types: Iterable[str],
    instance_type: str | None,
    market: str | None,
) -> float:
    """$/hour of one node: its instance type (else the template's first) in its market."""
    if instance_type is None:
        instance_type = next(iter(instance_types), None)
    price = prices.get(instance_type or "")
    return price.hourly(market) if price else 0.0

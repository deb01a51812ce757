"""AWS reserved capacity: On-Demand Capacity Reservations and Capacity Blocks for ML.

The shapes (EC2 API Reference, version 2016-11-15):
- LaunchTemplateData.CapacityReservationSpecification: `CapacityReservationPreference:
  open`, or `CapacityReservationTarget` with `CapacityReservationId` or
  `CapacityReservationResourceGroupArn` (API_LaunchTemplateCapacityReservationSpecificationRequest);
- a Capacity Block also needs `InstanceMarketOptions.MarketType = capacity-block` in the
  launch template and CreateFleet's `TargetCapacitySpecification.DefaultTargetCapacityType
  = capacity-block` (API_TargetCapacitySpecificationRequest; "Use Capacity Blocks with EC2
  Fleet" in the EC2 User Guide);
- a targeted reservation through EC2 Fleet: `OnDemandOptions.CapacityReservationOptions.
  UsageStrategy = use-capacity-reservations-first` (API_CapacityReservationOptionsRequest);
- DescribeCapacityReservations: TotalInstanceCount, AvailableInstanceCount, StartDate,
  EndDate, State, ReservationType (`capacity-block` for a block) per CapacityReservation.

A launch a targeted reservation cannot hold fails with ReservationCapacityExceeded (or a
capacity code, for the host or the block); the provider then launches the rest on-demand
(`reservation_fallback = "on-demand"`, saying so) or fails naming the reservation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import LaunchError, LaunchSpec, ReservationTarget
from clustermgr.providers.reservations import ReservationFacts

JSON = dict[str, Any]
FACTS_TTL_S = 600.0  # a block's window does not move; its free count is only shown
# what EC2 answers when a reservation (or its hosts) has no room for the launch
FULL_CODES = frozenset(
    {
        "ReservationCapacityExceeded",
        "InsufficientCapacityOnHost",
        "InsufficientInstanceCapacity",
        "InsufficientReservedInstanceCapacity",
    }
)
ON_DEMAND_SUFFIX = "-on-demand"  # the fallback's own launch template


def template_data(spec: LaunchSpec) -> JSON:
    """The launch template keys for a spec's reservation ({} for none)."""
    target = spec.reservation
    if target is None or target.kind == "group":
        return {}
    if target.preference == "open":
        return {"CapacityReservationSpecification": {"CapacityReservationPreference": "open"}}
    key = (
        "CapacityReservationResourceGroupArn"
        if target.kind == "resource-group"
        else ("CapacityReservationId")
    )
    data: JSON = {
        "CapacityReservationSpecification": {"CapacityReservationTarget": {key: target.ref}}
    }
    if target.kind == "capacity-block":
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return data


def capacity_type(spec: LaunchSpec) -> str:
    """CreateFleet's DefaultTargetCapacityType."""
    target = spec.reservation
    return (
        "capacity-block" if target is not None and target.kind == "capacity-block" else spec.market
    )


def on_demand_options(spec: LaunchSpec) -> JSON:
    options: JSON = {"AllocationStrategy": "prioritized"}
    target = spec.reservation
    if target is not None and target.preference == "targeted" and target.kind != "capacity-block":
        options["CapacityReservationOptions"] = {"UsageStrategy": "use-capacity-reservations-first"}
    return options


def without_reservation(spec: LaunchSpec) -> LaunchSpec:
    """The same launch, on-demand outside any reservation (the fallback)."""
    return replace(spec, reservation=None)


def to_facts(item: Mapping[str, Any]) -> ReservationFacts:
    """One DescribeCapacityReservations item."""
    kind = "capacity-block" if item.get("ReservationType") == "capacity-block" else "reservation"
    start, end = item.get("StartDate"), item.get("EndDate")
    return ReservationFacts(
        reservation_id=str(item["CapacityReservationId"]),
        kind=kind,
        instance_type=str(item.get("InstanceType") or ""),
        total=int(item.get("TotalInstanceCount") or 0),
        available=int(item.get("AvailableInstanceCount") or 0),
        state=str(item.get("State") or "unknown"),
        zone=item.get("AvailabilityZone"),
        start=start if isinstance(start, datetime) else None,
        end=end if isinstance(end, datetime) else None,
    )


def block_refusal(facts: ReservationFacts, now: datetime) -> str | None:
    """Why a Capacity Block cannot be launched into now (None: inside its window)."""
    span = f"{_at(facts.start)} to {_at(facts.end)}"
    if facts.start is not None and now < facts.start:
        return f"capacity block {facts.reservation_id} starts at {_at(facts.start)} (window {span})"
    if facts.end is not None and now >= facts.end:
        return f"capacity block {facts.reservation_id} ended at {_at(facts.end)} (window {span})"
    if facts.state not in ("active", "unknown"):
        return f"capacity block {facts.reservation_id} is {facts.state} (window {span})"
    return None


def is_full(errors: Sequence[LaunchError]) -> bool:
    return any(e.code in FULL_CODES for e in errors)


def named(errors: Sequence[LaunchError], target: ReservationTarget) -> list[LaunchError]:
    """The errors of a reservation that could not hold the launch, naming it."""
    return [
        replace(
            e,
            message=f"{_what(target)} cannot hold the launch (reservation_fallback = none): "
            f"{e.message}",
        )
        if e.code in FULL_CODES
        else e
        for e in errors
    ]


def fallback_line(target: ReservationTarget, held: int, wanted: int, request_id: str) -> str:
    return (
        f"request {request_id}: {_what(target)} held {held} of {wanted} instance(s); launching "
        f"the other {wanted - held} on-demand (reservation_fallback = on-demand)"
    )


class ReservationFactsCache:
    """DescribeCapacityReservations answers per id, for the launch's window check."""

    def __init__(self, describe: Callable[[list[str]], list[Mapping[str, Any]]]) -> None:
        self._describe = describe
        self._lock = threading.Lock()
        self._facts: dict[str, tuple[float, ReservationFacts]] = {}

    def read(self, ids: Sequence[str]) -> list[ReservationFacts]:
        """Ask EC2 (one call for all ids) and remember the answers."""
        facts = [to_facts(item) for item in self._describe(list(ids))] if ids else []
        with self._lock:
            for fact in facts:
                self._facts[fact.reservation_id] = (time.monotonic() + FACTS_TTL_S, fact)
        return facts

    def one(self, reservation_id: str) -> ReservationFacts:
        with self._lock:
            until, fact = self._facts.get(reservation_id, (0.0, None))
        if fact is not None and until > time.monotonic():
            return fact
        found = [f for f in self.read([reservation_id]) if f.reservation_id == reservation_id]
        if not found:
            raise ProviderError(
                ErrorKind.INVALID,
                f"capacity reservation {reservation_id} not found by DescribeCapacityReservations",
                code="InvalidCapacityReservationId.NotFound",
            )
        return found[0]


def now() -> datetime:
    return datetime.now(UTC)


def _what(target: ReservationTarget) -> str:
    names = {"capacity-block": "capacity block", "resource-group": "reservation group"}
    return f"{names.get(target.kind, 'capacity reservation')} {target.ref}"


def _at(when: datetime | None) -> str:
    return "-" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")

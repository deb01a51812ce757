"""Capacity reservations and Capacity Blocks for FakeAws (moto 5 has neither).

The shapes are EC2's (API Reference, version 2016-11-15, as botocore's ec2 model has them):
- DescribeCapacityReservations -> `capacityReservationSet` of CapacityReservation items:
  capacityReservationId, instanceType, availabilityZone, totalInstanceCount,
  availableInstanceCount, state (active / scheduled / expired ...), startDate, endDate,
  instanceMatchCriteria (open / targeted), reservationType (default / capacity-block);
  an unknown id answers InvalidCapacityReservationId.NotFound
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeCapacityReservations.html);
- a launch template's CapacityReservationSpecification: CapacityReservationPreference
  'open', or CapacityReservationTarget with CapacityReservationId or
  CapacityReservationResourceGroupArn, and InstanceMarketOptions.MarketType
  'capacity-block' (API_LaunchTemplateCapacityReservationSpecificationRequest.html);
- an instance launched into one carries CapacityReservationId in DescribeInstances
  (API_Instance.html); a targeted reservation with too little room fails the rest with
  ReservationCapacityExceeded (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html),
  while an 'open' launch runs what no reservation holds as plain on-demand.

The reservation's capacity is finite: what its live instances use is not available.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from xml.sax.saxutils import escape

INSTANCE_ID = re.compile(rb"<instanceId>(i-[0-9a-f]+)</instanceId>")
FULL_CODE = "ReservationCapacityExceeded"


@dataclass
class FakeReservation:
    reservation_id: str
    instance_type: str
    zone: str
    total: int
    match: str = "targeted"  # instanceMatchCriteria: open | targeted
    reservation_type: str = "default"  # default | capacity-block
    start: datetime | None = None
    end: datetime | None = None
    groups: tuple[str, ...] = ()  # resource group ARNs it is a member of
    instances: set[str] = field(default_factory=set)

    def state(self, now: datetime) -> str:
        if self.start is not None and now < self.start:
            return "scheduled"
        if self.end is not None and now >= self.end:
            return "expired"
        return "active"


@dataclass(frozen=True)
class Target:
    """What a launch template asks for: a reservation id, a group ARN, or 'open'."""

    reservation_id: str | None = None
    group: str | None = None
    open: bool = False
    block: bool = False


def target_of(data: dict[str, Any]) -> Target | None:
    """The reservation target in a launch template's data (moto keeps it as sent)."""
    spec = data.get("CapacityReservationSpecification") or {}
    block = (data.get("InstanceMarketOptions") or {}).get("MarketType") == "capacity-block"
    aim = spec.get("CapacityReservationTarget") or {}
    if aim.get("CapacityReservationId"):
        return Target(reservation_id=aim["CapacityReservationId"], block=block)
    if aim.get("CapacityReservationResourceGroupArn"):
        return Target(group=aim["CapacityReservationResourceGroupArn"], block=block)
    if spec.get("CapacityReservationPreference") == "open":
        return Target(open=True)
    return None


def describe_xml(items: list[FakeReservation], used: dict[str, int], now: datetime, ns: str) -> str:
    rows = "".join(_item(r, used.get(r.reservation_id, 0), now) for r in items)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeCapacityReservationsResponse '
        f'xmlns="{ns}"><requestId>fake</requestId><capacityReservationSet>{rows}'
        "</capacityReservationSet></DescribeCapacityReservationsResponse>"
    )


def _item(res: FakeReservation, used: int, now: datetime) -> str:
    dates = "".join(
        f"<{tag}>{when.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.000Z')}</{tag}>"
        for tag, when in (("startDate", res.start), ("endDate", res.end))
        if when is not None
    )
    return (
        f"<item><capacityReservationId>{escape(res.reservation_id)}</capacityReservationId>"
        f"<instanceType>{escape(res.instance_type)}</instanceType>"
        f"<availabilityZone>{escape(res.zone)}</availabilityZone>"
        f"<totalInstanceCount>{res.total}</totalInstanceCount>"
        f"<availableInstanceCount>{max(0, res.total - used)}</availableInstanceCount>"
        f"<state>{res.state(now)}</state>{dates}"
        f"<instanceMatchCriteria>{res.match}</instanceMatchCriteria>"
        f"<reservationType>{res.reservation_type}</reservationType></item>"
    )


def full_error_xml(target: Target, itype: str) -> str:
    """A CreateFleet `errorSet` item for a targeted reservation with no room left."""
    what = target.reservation_id or target.group or "reservation"
    message = f"Insufficient capacity in the targeted Capacity Reservation {what}."
    return (
        "<errorSet><item><launchTemplateAndOverrides><overrides>"
        f"<instanceType>{escape(itype)}</instanceType></overrides></launchTemplateAndOverrides>"
        f"<lifecycle>on-demand</lifecycle><errorCode>{FULL_CODE}</errorCode>"
        f"<errorMessage>{escape(message)}</errorMessage></item></errorSet>"
    )

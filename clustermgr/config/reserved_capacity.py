"""Templates that launch into reserved capacity (issue 24 item 2): the keys and the
combinations that make sense. The provider-type checks (which kinds offer which
reservations) are in settings.py, by capability.

AWS: `capacity_reservation = { id = "cr-…" | resource_group = "arn:…", preference }`, an
On-Demand Capacity Reservation or a Capacity Block (`market = "capacity-block"`, by id);
Azure: `capacity_reservation_group` (a resource id or a group name). `reservation_fallback`
says what a launch the reservation cannot hold does: run on-demand, or fail naming it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from clustermgr.config.base import StrictModel

Fallback = Literal["on-demand", "none"]


class CapacityReservation(StrictModel):
    """An AWS capacity reservation a template launches into. `targeted` sends the
    reservation (or resource group) as the launch's CapacityReservationTarget; `open`
    launches with CapacityReservationPreference 'open' (any open reservation that matches,
    the id naming the one clustermgr shows)."""

    id: str | None = Field(None, pattern=r"^cr-[0-9a-f]{8,17}$")
    resource_group: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:resource-groups:\S+$")
    preference: Literal["open", "targeted"] = "targeted"

    @model_validator(mode="after")
    def _one_target(self) -> CapacityReservation:
        if (self.id is None) == (self.resource_group is None):
            raise ValueError("give exactly one of id ('cr-…') or resource_group ('arn:…')")
        if self.preference == "open" and self.resource_group is not None:
            raise ValueError(
                "preference 'open' cannot name a resource_group (EC2 targets a group only "
                "with preference 'targeted')"
            )
        return self


def reservation_problem(
    market: str,
    reservation: CapacityReservation | None,
    group: str | None,
    fallback: Fallback | None,
) -> str | None:
    """What is wrong with a template's reservation keys, one line; None when they fit."""
    if reservation is not None and group is not None:
        return (
            "capacity_reservation (AWS) and capacity_reservation_group (Azure) exclude each other"
        )
    reserved = reservation is not None or group is not None
    if market == "spot" and reserved:
        return (
            "market 'spot' cannot launch into a capacity reservation (it holds on-demand capacity)"
        )
    if market == "capacity-block":
        if reservation is None or reservation.id is None:
            return "market 'capacity-block' needs capacity_reservation.id, the block's 'cr-…' id"
        if reservation.preference != "targeted":
            return "market 'capacity-block' needs capacity_reservation.preference 'targeted'"
    if fallback is not None and not reserved:
        return "reservation_fallback needs capacity_reservation or capacity_reservation_group"
    if fallback == "none" and reservation is not None and reservation.preference == "open":
        return (
            "reservation_fallback 'none' needs capacity_reservation.preference 'targeted' "
            "(with 'open', EC2 runs what the reservation cannot hold on-demand itself)"
        )
    return None

"""Reserved capacity across providers: what a template's launches go into
(`reservation_target`), the facts a cloud reports about a reservation
(`ReservationFacts`), read with the catalog refresh and kept in the database
(`reservations` table), so `clustermgr catalog --reservations` and `status` ask no cloud.

A provider that can read its reservations offers `reservations(targets)`
(`ReservationReader`); the AWS one reads DescribeCapacityReservations, the Azure one its
capacity reservation groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from clustermgr.config import Settings, TemplateSettings
from clustermgr.db.models import ReservationRow
from clustermgr.providers.base import ReservationTarget


@dataclass(frozen=True)
class ReservationFacts:
    """One reservation as its cloud reports it. `kind`: reservation, capacity-block or
    group; `available` is what the cloud says is free (`total - available` in use)."""

    reservation_id: str
    kind: str
    instance_type: str
    total: int
    available: int
    state: str
    zone: str | None = None
    start: datetime | None = None
    end: datetime | None = None

    @property
    def in_use(self) -> int:
        return max(0, self.total - self.available)


@runtime_checkable
class ReservationReader(Protocol):
    def reservations(self, targets: Sequence[ReservationTarget]) -> list[ReservationFacts]:
        """The facts of each target's reservations (one cloud call per kind, not per target)."""
        ...


def reservation_target(template: TemplateSettings) -> ReservationTarget | None:
    """The reserved capacity a template's launches go into, if any."""
    fallback = template.reservation_fallback != "none"
    if template.capacity_reservation_group is not None:
        return ReservationTarget("group", template.capacity_reservation_group, fallback=fallback)
    found = template.capacity_reservation
    if found is None:
        return None
    if found.resource_group is not None:
        return ReservationTarget("resource-group", found.resource_group, fallback=fallback)
    if template.market == "capacity-block":
        return ReservationTarget("capacity-block", found.id or "", found.preference, fallback)
    return ReservationTarget("reservation", found.id or "", found.preference, fallback)


def targets_of(settings: Settings, provider: str) -> dict[str, list[str]]:
    """Each reservation one provider's templates launch into -> those templates."""
    found: dict[str, list[str]] = {}
    for template in settings.templates:
        target = reservation_target(template) if template.provider == provider else None
        if target is not None:
            found.setdefault(target.ref, []).append(template.name)
    return found


def refresh_reservations(
    session: Session, settings: Settings, provider_name: str, provider: object
) -> int:
    """Read a provider's reservations (those its templates name) and store them; returns
    how many. A provider that reads none, or whose templates name none, stores nothing."""
    if not isinstance(provider, ReservationReader):
        return 0
    templates = targets_of(settings, provider_name)
    wanted = [
        t
        for t in (reservation_target(settings.template(names[0])) for names in templates.values())
        if t is not None
    ]
    if not wanted:
        return 0
    facts = provider.reservations(wanted)
    now = datetime.now(UTC)
    session.execute(delete(ReservationRow).where(ReservationRow.provider == provider_name))
    for fact in facts:
        session.add(
            ReservationRow(
                provider=provider_name,
                reservation_id=fact.reservation_id,
                kind=fact.kind,
                instance_type=fact.instance_type,
                zone=fact.zone,
                total=fact.total,
                available=fact.available,
                state=fact.state,
                starts_at=fact.start,
                ends_at=fact.end,
                templates=",".join(templates.get(fact.reservation_id, [])),
                updated_at=now,
            )
        )
    return len(facts)


def stored_reservations(session: Session, provider: str | None = None) -> list[ReservationRow]:
    query = select(ReservationRow).order_by(ReservationRow.provider, ReservationRow.reservation_id)
    if provider:
        query = query.where(ReservationRow.provider == provider)
    return list(session.scalars(query))


def window(starts_at: datetime | None, ends_at: datetime | None) -> str:
    """A reservation's window as one short text ('' when it has none)."""
    if starts_at is None and ends_at is None:
        return ""

    def at(when: datetime | None) -> str:
        return "" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M")

    return f"{at(starts_at)} to {at(ends_at)} UTC"

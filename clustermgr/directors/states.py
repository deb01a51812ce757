"""The director state machine and its records: every allowed move is listed here, and each
one is an event row (`director_events`), like a node's.

    LAUNCHING -> BOOTING -> SYNCING -> READY <-> UNHEALTHY
    any live state -> LOST (instance gone or unreachable) -> replaced by a new launch
    any live state -> STOPPING -> STOPPED (idle region, or removed from config)

Burst nodes of a region launch only while its director is READY (or UNHEALTHY for a
reason that still lets nodes boot: see the lifecycle module).
"""

from __future__ import annotations

import enum
import re
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.core.errors import IllegalTransitionError
from clustermgr.db.models import Director, DirectorEvent, Provider, Region


class DirectorState(enum.StrEnum):
    LAUNCHING = "launching"  # the cloud was asked for its instance
    BOOTING = "booting"  # the instance exists; waiting for it to answer
    SYNCING = "syncing"  # answers; its image and LDAP replica are being brought in sync
    READY = "ready"  # healthy: image verified, LDAP replica answering
    UNHEALTHY = "unhealthy"  # a health check failed; retried, replaced if it does not heal
    LOST = "lost"  # its instance is gone or never came up: a new one replaces it
    STOPPING = "stopping"
    STOPPED = "stopped"


D = DirectorState
ALLOWED: dict[DirectorState, frozenset[DirectorState]] = {
    D.LAUNCHING: frozenset({D.BOOTING, D.LOST, D.STOPPING}),
    D.BOOTING: frozenset({D.SYNCING, D.LOST, D.STOPPING}),
    D.SYNCING: frozenset({D.READY, D.UNHEALTHY, D.LOST, D.STOPPING}),
    D.READY: frozenset({D.SYNCING, D.UNHEALTHY, D.LOST, D.STOPPING}),
    D.UNHEALTHY: frozenset({D.SYNCING, D.READY, D.LOST, D.STOPPING}),
    D.LOST: frozenset({D.LAUNCHING, D.STOPPING, D.STOPPED}),
    D.STOPPING: frozenset({D.STOPPED, D.LOST}),
    D.STOPPED: frozenset({D.LAUNCHING}),
}
LIVE = frozenset({D.LAUNCHING, D.BOOTING, D.SYNCING, D.READY, D.UNHEALTHY})
SERVING = frozenset({D.READY})  # burst nodes of the region may launch


def director_name(provider: str, region: str) -> str:
    """`director-<provider>-<region>`, lower case, anything but [a-z0-9-] made a dash."""
    raw = f"director-{provider}-{region}".lower()
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", raw)).strip("-")


def transition(
    director: Director,
    new: DirectorState,
    reason: str,
    actor: str,
    *,
    now: datetime | None = None,
) -> None:
    """Move `director` to `new` with an event in its session (same transaction). A move to
    the state it is in is no move; one not in ALLOWED raises IllegalTransitionError."""
    old = DirectorState(director.state)
    if old is new:
        return
    if new not in ALLOWED[old]:
        raise IllegalTransitionError(
            f"director {director.name}: {old.value} -> {new.value} is not an allowed "
            f"transition (from {old.value}: {', '.join(sorted(s.value for s in ALLOWED[old]))})"
        )
    at = now or datetime.now(UTC)
    director.state = new.value
    director.state_reason = reason
    director.state_since = at
    director.updated_at = at
    director.events.append(
        DirectorEvent(at=at, old_state=old.value, new_state=new.value, reason=reason, actor=actor)
    )


def find(session: Session, name: str) -> Director | None:
    return session.scalars(select(Director).filter_by(name=name)).one_or_none()


def region_of(session: Session, director: Director) -> tuple[str, str]:
    """(provider name, region name) of a director."""
    region = session.get(Region, director.region_id)
    assert region is not None  # a foreign key
    provider = session.get(Provider, region.provider_id)
    assert provider is not None
    return provider.name, region.name


def ensure(
    session: Session, provider: str, region: str, *, actor: str, now: datetime | None = None
) -> Director:
    """The director row of (provider, region), made STOPPED (with its region row) when
    there is none. The provider row must exist (`clustermgr nodes sync` makes it)."""
    provider_row = session.scalars(select(Provider).filter_by(name=provider)).one_or_none()
    if provider_row is None:
        raise LookupError(
            f"provider {provider!r} is not in the database: run `clustermgr nodes sync`"
        )
    region_row = session.scalars(
        select(Region).filter_by(provider_id=provider_row.id, name=region)
    ).one_or_none()
    if region_row is None:
        region_row = Region(provider_id=provider_row.id, name=region)
        session.add(region_row)
        session.flush()
    name = director_name(provider, region)
    director = find(session, name)
    if director is None:
        at = now or datetime.now(UTC)
        director = Director(
            name=name,
            region_id=region_row.id,
            state=DirectorState.STOPPED.value,
            state_reason="",
            state_since=at,
            created_at=at,
            updated_at=at,
        )
        session.add(director)
        session.flush()
    return director

"""What the scaling engine needs to know about directors each cycle, read in one go: which
templates wait for their region's director (a `required` director that is not READY), and
which instances director rows hold or are launching (never a node orphan: the director
lifecycle adopts or cleans them up)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import Settings
from clustermgr.db.models import Director
from clustermgr.directors.lifecycle import waiting_reason
from clustermgr.directors.states import SERVING, DirectorState, director_name
from clustermgr.providers.base import CloudInstance, InstanceState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DirectorGate:
    waiting: Mapping[str, str] = field(default_factory=dict)  # template -> (Code:DIRECTOR) ...
    instances: frozenset[str] = frozenset()  # instance ids director rows hold
    requests: frozenset[str] = frozenset()  # request ids of director launches in progress


def read_gate(
    session: Session,
    settings: Settings,
    listed: Mapping[str, Mapping[str, CloudInstance]] | None = None,
) -> DirectorGate:
    """`listed`: this cycle's instance listing per provider (the providers it could list).
    A director the database has READY whose instance that listing lacks, or shows not
    running, is waited for too: its death is news the director pass acts on only after
    this cycle's launches."""
    rows = {row.name: row for row in session.scalars(select(Director))}
    waiting: dict[str, str] = {}
    for spec in settings.directors:
        if not spec.required:
            continue
        name = director_name(spec.provider, settings.provider(spec.provider).region)
        row = rows.get(name)
        state = _state(row)
        if state in SERVING and not _gone(row, (listed or {}).get(spec.provider)):
            continue
        if state in SERVING:
            state = DirectorState.LOST
        for template in settings.templates:
            if template.provider == spec.provider:
                waiting[template.name] = waiting_reason(name, state)
    held = frozenset(r.instance_id for r in rows.values() if r.instance_id)
    launching = frozenset(
        r.request_id
        for r in rows.values()
        if r.request_id and r.state == DirectorState.LAUNCHING.value
    )
    return DirectorGate(waiting, held, launching)


def _state(row: Director | None) -> DirectorState | None:
    """The row's state; an unknown one (a row no cm-scale wrote) counts as no director."""
    if row is None:
        return None
    try:
        return DirectorState(row.state)
    except ValueError:
        log.warning("director %r: unknown state %r in the database", row.name, str(row.state)[:40])
        return None


def _gone(row: Director | None, listing: Mapping[str, CloudInstance] | None) -> bool:
    if row is None or listing is None or not row.instance_id:
        return False  # not listed this cycle: trust the database
    instance = listing.get(row.instance_id)
    return instance is None or instance.state is not InstanceState.RUNNING

"""What the scaling engine needs to know about directors each cycle, read in one go: which
templates wait for their region's director (a `required` director that is not READY), and
which instances director rows hold (never a node orphan)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import Settings
from clustermgr.db.models import Director
from clustermgr.directors.lifecycle import waiting_reason
from clustermgr.directors.state import SERVING, DirectorState, director_name


@dataclass(frozen=True)
class DirectorGate:
    waiting: Mapping[str, str] = field(default_factory=dict)  # template -> (Code:DIRECTOR) ...
    instances: frozenset[str] = frozenset()  # instance ids director rows hold


def read_gate(session: Session, settings: Settings) -> DirectorGate:
    if not settings.directors:
        return DirectorGate()
    rows = {row.name: row for row in session.scalars(select(Director))}
    waiting: dict[str, str] = {}
    for spec in settings.directors:
        if not spec.required:
            continue
        name = director_name(spec.provider, settings.provider(spec.provider).region)
        row = rows.get(name)
        state = DirectorState(row.state) if row is not None else None
        if state in SERVING:
            continue
        for template in settings.templates:
            if template.provider == spec.provider:
                waiting[template.name] = waiting_reason(name, state)
    held = frozenset(r.instance_id for r in rows.values() if r.instance_id)
    return DirectorGate(waiting, held)

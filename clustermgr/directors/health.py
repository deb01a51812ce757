"""What the director lifecycle asks of a director, and the default answers.

Two hooks: a `DirectorHealth` answers "does it answer, and is it in sync?" and a `Syncer`
brings its image or LDAP replica in sync (called while the director is SYNCING). The default
health check connects to the director's configured TCP ports (LDAP 389, LDAPS 636, rsync 873)
and reads the replica tables that the image and LDAP replication fill: every image the
director serves has its current revision verified there, and its LDAP replica says "ok".
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import DirectorSettings, Settings
from clustermgr.db.database import Database
from clustermgr.db.models import Image, ImageReplica, LdapReplica
from clustermgr.directors.states import DirectorState

LDAP_OK = "ok"


@dataclass(frozen=True)
class DirectorInfo:
    """One director row as a cycle saw it (plain data: hooks never get a session's row)."""

    id: int
    name: str
    provider: str
    region: str
    state: DirectorState
    state_since: datetime | None = None
    instance_id: str | None = None
    request_id: str | None = None
    private_address: str | None = None
    launched_at: datetime | None = None
    healthy_at: datetime | None = None
    idle_since: datetime | None = None


@dataclass(frozen=True)
class HealthResult:
    reachable: bool  # answers on every configured port
    synced: bool  # image revisions verified, LDAP replica ok
    detail: str  # one line for `clustermgr directors show` and the events

    @property
    def healthy(self) -> bool:
        return self.reachable and self.synced


class DirectorHealth(Protocol):
    def check(self, director: DirectorInfo) -> HealthResult: ...


class Syncer(Protocol):
    """Brings one kind of replica (image tree, LDAP) on a director in sync. Called each
    lifecycle pass while the director is SYNCING: it must be idempotent, and quick or
    leave the long work to its own job (the pass waits for it)."""

    def sync(self, director: DirectorInfo) -> None: ...


Connect = Callable[[str, int, float], bool]


def tcp_open(address: str, port: int, timeout_s: float) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class PortsAndReplicas:
    """The default health check: TCP ports, then the replica tables."""

    def __init__(self, settings: Settings, database: Database, connect: Connect = tcp_open):
        self.settings = settings
        self.db = database
        self.connect = connect

    def check(self, director: DirectorInfo) -> HealthResult:
        spec = self.settings.director(director.provider)
        if spec is None:
            return HealthResult(False, False, "no longer declared in [[directors]]")
        address = director.private_address
        if not address:
            return HealthResult(False, False, "no address yet")
        closed = [
            port
            for port in spec.health_ports
            if not self.connect(address, port, spec.health_timeout_s)
        ]
        if closed:
            ports = ", ".join(str(p) for p in closed)
            return HealthResult(False, False, f"{address}: no answer on port {ports}")
        with self.db.session() as session:
            missing = replica_problems(session, director.id, spec)
        ports = ",".join(str(p) for p in spec.health_ports)
        if missing:
            return HealthResult(True, False, f"answers on {ports}; " + "; ".join(missing))
        return HealthResult(True, True, f"answers on {ports}; replicas in sync")


def replica_problems(session: Session, director_id: int, spec: DirectorSettings) -> list[str]:
    """What keeps the director's replicas from being in sync, one phrase each ([] when
    they are): an image whose current revision (its newest row) is not verified on it, an
    LDAP replica that is missing or not ok."""
    problems = []
    for name in spec.images:
        current = session.scalars(
            select(Image).filter_by(name=name).order_by(Image.created_at.desc(), Image.id.desc())
        ).first()
        if current is None:
            problems.append(f"image {name} has no revision yet")
            continue
        replica = session.scalars(
            select(ImageReplica).filter_by(image_id=current.id, director_id=director_id)
        ).one_or_none()
        if replica is None:
            problems.append(f"image {name} {current.version} not synced yet")
        elif replica.verified_at is None or replica.checksum != current.checksum:
            problems.append(f"image {name} {current.version} not verified ({replica.state})")
    if spec.ldap:
        ldap = session.scalars(select(LdapReplica).filter_by(director_id=director_id)).one_or_none()
        if ldap is None:
            problems.append("LDAP replica not set up yet")
        elif ldap.state != LDAP_OK:
            problems.append(
                f"LDAP replica {ldap.state}" + (f": {ldap.error}" if ldap.error else "")
            )
    return problems


def run_syncers(syncers: Sequence[Syncer], director: DirectorInfo) -> list[str]:
    """Call every syncer; a failing one is a line in the result, never an exception."""
    errors = []
    for syncer in syncers:
        try:
            syncer.sync(director)
        except Exception as exc:  # a hook's failure must not stop the other directors
            errors.append(f"{type(syncer).__name__}: {exc}")
    return errors

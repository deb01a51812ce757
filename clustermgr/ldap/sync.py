"""LDAP replication to the directors, one run per director, and its records.

A run picks the mode (syncrepl when the head offers RFC 4533 and `mode` is auto or
syncrepl, else pull), connects to both servers (a server that does not answer is retried a
few times), replicates, and writes the director's `ldap_replicas` row: mode, state, entries,
lag, watermark, times and one error line. States:

    ok           in sync (syncrepl: lag within max_lag_s; pull: every entry applied)
    lagging      behind: syncrepl lag above max_lag_s after a re-seed, or pull entries
                 the replica refused (each named, with the server's message)
    failed       the run could not do its work (the head unreachable, a bind refused,
                 cn=config not writable, a password unreadable)
    unreachable  the director's slapd did not answer

Conflicts (pull: a replica-side edit overwritten) and re-seeds (syncrepl) are also cluster
events (`ldap-conflict`, `ldap-reseed`), so `clustermgr events` shows them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ldap3 import Connection  # type: ignore[import-untyped]
from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import LdapSettings
from clustermgr.core.errors import NotFoundError, UsageError
from clustermgr.core.inputs import usable_address
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, Director, LdapReplica
from clustermgr.ldap import pull as ldap_pull
from clustermgr.ldap import syncrepl as ldap_syncrepl
from clustermgr.ldap.connection import (
    Endpoint,
    LdapConfigError,
    LdapError,
    LdapUnreachable,
    connect,
    head_endpoint,
    replica_endpoint,
    supports_syncrepl,
)

ACTOR = "clustermgr-ldap"
MAX_FAILURES_LISTED = 5


@dataclass(frozen=True)
class DirectorTarget:
    id: int
    name: str
    address: str


@dataclass
class SyncOutcome:
    """One director's run, for the CLI, the record and the tests."""

    director: str
    mode: str  # syncrepl or pull
    state: str  # ok, lagging, failed, unreachable
    error: str = ""
    entries: int | None = None
    lag_seconds: float | None = None
    provider_csn: str | None = None
    replica_csn: str | None = None
    watermark: str | None = None
    full: bool = False
    added: int = 0
    modified: int = 0
    deleted: int = 0
    conflicts: list[str] = field(default_factory=list)
    failures: list[ldap_pull.EntryFailure] = field(default_factory=list)
    reseeded: str = ""  # why the syncrepl consumer was re-seeded
    configured: bool = False  # syncrepl: cn=config was written
    duration_s: float = 0.0

    def summary(self) -> str:
        """One line for people."""
        head = f"{self.director}: {self.mode} {self.state}"
        if self.mode == "pull" and self.state in ("ok", "lagging"):
            head += (
                f", {'full' if self.full else 'incremental'}: +{self.added} ~{self.modified} "
                f"-{self.deleted}, {len(self.conflicts)} conflicts"
            )
        if self.mode == "syncrepl" and self.state in ("ok", "lagging"):
            lag = "unknown" if self.lag_seconds is None else f"{self.lag_seconds:.3f} s"
            head += f", lag {lag}" + (", consumer configured" if self.configured else "")
            if self.reseeded:
                head += f", re-seeded ({self.reseeded})"
        if self.entries is not None:
            head += f", {self.entries} entries"
        head += f" ({self.duration_s:.2f} s)"
        return head + (f": {self.error}" if self.error else "")

    def as_json(self) -> dict[str, Any]:
        return {
            "director": self.director,
            "mode": self.mode,
            "state": self.state,
            "error": self.error,
            "entries": self.entries,
            "lag_seconds": self.lag_seconds,
            "provider_csn": self.provider_csn,
            "replica_csn": self.replica_csn,
            "watermark": self.watermark,
            "full": self.full,
            "added": self.added,
            "modified": self.modified,
            "deleted": self.deleted,
            "conflicts": self.conflicts,
            "failures": [{"dn": f.dn, "message": f.message} for f in self.failures],
            "reseeded": self.reseeded,
            "duration_s": round(self.duration_s, 3),
        }


def targets(session: Session, director: str | None) -> list[DirectorTarget]:
    """The named director (it must have an address), or every director with one."""
    if director is not None:
        row = session.scalars(select(Director).filter_by(name=director)).one_or_none()
        if row is None:
            raise NotFoundError(
                f"no director named {director!r} (clustermgr ldap status lists them)"
            )
        address = usable_address(row.private_address, f"director {row.name}")
        if address is None:
            raise UsageError(f"director {director} has no usable address: nothing to sync to")
        return [DirectorTarget(row.id, row.name, address)]
    rows = session.scalars(
        select(Director).where(Director.private_address.is_not(None)).order_by(Director.name)
    )
    found = ((r, usable_address(r.private_address, f"director {r.name}")) for r in rows)
    return [DirectorTarget(r.id, r.name, address) for r, address in found if address]


def sync_director(
    database: Database,
    settings: LdapSettings,
    target: DirectorTarget,
    *,
    full: bool = False,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> SyncOutcome:
    """One replication run to one director, recorded in its ldap_replicas row."""
    started = time.perf_counter()
    at = clock()
    with database.session() as session:
        previous = _row(session, target.id)
        prior = (previous.mode, previous.watermark, previous.replica_csn) if previous else None
    outcome = _run(settings, target, full=full, prior=prior)
    outcome.duration_s = time.perf_counter() - started
    with database.session() as session:
        _record(session, target, outcome, started_at=at, finished_at=clock())
    return outcome


def _run(
    settings: LdapSettings,
    target: DirectorTarget,
    *,
    full: bool,
    prior: tuple[str, str | None, str | None] | None,
) -> SyncOutcome:
    fallback_mode = prior[0] if prior else ("pull" if settings.mode == "auto" else settings.mode)
    head_ep = head_endpoint(settings)
    replica_ep = replica_endpoint(settings, target.name, target.address)
    outcome = SyncOutcome(target.name, fallback_mode, "failed", full=full)
    head = replica = None
    try:
        head = connect(head_ep)
        mode = settings.mode
        if mode == "auto":
            mode = "syncrepl" if supports_syncrepl(head) else "pull"
        outcome.mode = mode
        try:
            replica = connect(replica_ep)
        except LdapUnreachable as exc:
            outcome.state, outcome.error = "unreachable", str(exc)
            return outcome
        if mode == "syncrepl":
            password = head_ep.password.read(head_ep.describe()).reveal()
            _syncrepl(outcome, head, replica, settings, head_ep, password, full=full)
        else:
            watermark, since = (
                (prior[1], prior[2]) if prior and prior[0] == "pull" else (None, None)
            )
            _pull(outcome, head, replica, settings, full=full, watermark=watermark, since=since)
    except LdapUnreachable as exc:
        # the head, or the replica's connection lost mid-run
        outcome.state = "unreachable" if exc.replica else "failed"
        outcome.error = str(exc)
    except (LdapConfigError, LdapError) as exc:
        outcome.state, outcome.error = "failed", str(exc)
    finally:
        for conn in (head, replica):
            if conn is not None:
                conn.unbind()
    return outcome


def _syncrepl(
    outcome: SyncOutcome,
    head: Connection,
    replica: Connection,
    settings: LdapSettings,
    head_ep: Endpoint,
    password: str,
    *,
    full: bool,
) -> None:
    report = ldap_syncrepl.run(head, replica, settings, head_ep, password, reseed=full)
    lag = report.lag
    outcome.lag_seconds = lag.seconds
    outcome.provider_csn, outcome.replica_csn = lag.provider_csn, lag.replica_csn
    outcome.entries = report.entries
    outcome.configured = report.consumer.changed
    outcome.reseeded = report.reseed_reason
    if lag.seconds is not None and lag.seconds <= settings.max_lag_s:
        outcome.state = "ok"
    elif lag.seconds is None and lag.provider_csn is None:
        outcome.state = "ok"  # an empty head: nothing to be behind
    else:
        outcome.state = "lagging"
        outcome.error = (
            f"still behind after a re-seed: {ldap_syncrepl.lag_text(lag, settings.max_lag_s)}"
        )


def _pull(
    outcome: SyncOutcome,
    head: Connection,
    replica: Connection,
    settings: LdapSettings,
    *,
    full: bool,
    watermark: str | None,
    since: str | None,
) -> None:
    report = ldap_pull.sync(
        head, replica, settings, full=full, watermark=watermark, since_csn=since
    )
    outcome.full = report.full
    outcome.added, outcome.modified, outcome.deleted = report.added, report.modified, report.deleted
    outcome.entries = report.entries
    outcome.conflicts = report.conflicts
    outcome.failures = report.failures
    outcome.watermark = report.watermark
    outcome.replica_csn = report.replica_csn
    outcome.lag_seconds = 0.0 if not report.failures else None
    if report.failures:
        outcome.state = "lagging"
        listed = "; ".join(f.line() for f in report.failures[:MAX_FAILURES_LISTED])
        more = len(report.failures) - MAX_FAILURES_LISTED
        outcome.error = (
            f"{len(report.failures)} entr{'y' if len(report.failures) == 1 else 'ies'} "
            f"not applied: {listed}" + (f" (and {more} more)" if more > 0 else "")
        )
    else:
        outcome.state = "ok"


def _row(session: Session, director_id: int) -> LdapReplica | None:
    return session.scalars(select(LdapReplica).filter_by(director_id=director_id)).one_or_none()


def _record(
    session: Session,
    target: DirectorTarget,
    outcome: SyncOutcome,
    *,
    started_at: datetime,
    finished_at: datetime,
) -> None:
    row = _row(session, target.id)
    if row is None:
        row = LdapReplica(director_id=target.id, mode=outcome.mode, state=outcome.state)
        session.add(row)
    row.mode = outcome.mode
    row.state = outcome.state
    row.error = outcome.error
    row.last_attempt_at = started_at
    row.updated_at = finished_at
    if outcome.state in ("ok", "lagging"):
        row.entries = outcome.entries or 0
        row.lag_seconds = outcome.lag_seconds
        row.provider_csn = outcome.provider_csn
        row.replica_csn = outcome.replica_csn
        row.watermark = outcome.watermark
        if outcome.mode == "pull" and outcome.full:
            row.last_full_at = finished_at
        if outcome.mode == "syncrepl" and outcome.reseeded:
            row.last_full_at = finished_at
    if outcome.state == "ok":
        row.last_success_at = finished_at
    events = [
        ("ldap-conflict", f"{dn} was changed on the replica; overwritten with the head's version")
        for dn in outcome.conflicts
    ]
    if outcome.reseeded:
        events.append(
            ("ldap-reseed", f"syncrepl consumer restarted with a fresh rid: {outcome.reseeded}")
        )
    for kind, message in events:
        session.add(ClusterEvent(at=finished_at, kind=kind, source=target.name, message=message))


STATUS_COLUMNS = ("director", "mode", "state", "lag_s", "last_success", "entries", "error")


def status_rows(session: Session) -> list[dict[str, Any]]:
    """Every director's LDAP replica record (directors never synced show as such)."""
    rows: list[dict[str, Any]] = []
    replicas = {r.director_id: r for r in session.scalars(select(LdapReplica))}
    for director in session.scalars(select(Director).order_by(Director.name)):
        replica = replicas.get(director.id)
        if replica is None:
            if director.private_address:
                rows.append(_never(director))
            continue
        rows.append(
            {
                "director": director.name,
                "address": director.private_address,
                "mode": replica.mode,
                "state": replica.state,
                "lag_s": None if replica.lag_seconds is None else round(replica.lag_seconds, 3),
                "last_success": replica.last_success_at,
                "last_attempt": replica.last_attempt_at,
                "last_full": replica.last_full_at,
                "entries": replica.entries,
                "provider_csn": replica.provider_csn,
                "replica_csn": replica.replica_csn,
                "watermark": replica.watermark,
                "error": replica.error,
            }
        )
    return rows


def _never(director: Director) -> dict[str, Any]:
    keys = "mode lag_s last_success last_attempt last_full entries provider_csn replica_csn"
    row: dict[str, Any] = {"director": director.name, "address": director.private_address}
    empty = dict.fromkeys([*keys.split(), "watermark"])
    return row | empty | {"state": "never synced", "error": ""}

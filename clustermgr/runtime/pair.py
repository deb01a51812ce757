"""What happens to the pair of heads, in the audit trail: takeovers, lost leases, database
outages, reloads and configuration changes become cluster events (`clustermgr events
--cluster`), each with the head that saw it as its source.

These are written outside the fence (a standby records them too), and a database outage is
recorded once it is over, by each head that met it, with its length and its first error.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select

from clustermgr.core.errors import ClusterMgrError
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent

log = logging.getLogger("cm-scale")

TAKEOVER = "takeover"
LEASE_LOST = "lease-lost"
DATABASE = "database"
RELOAD = "reload"
CONFIG = "config"
RELOAD_REFUSED = "reload refused"  # how a refused reload's event begins (`status` reads it)


@dataclass
class Outage:
    """The database away, as one head saw it: its first error and since when."""

    first_error: str
    since: float  # time.time()
    since_mono: float


class PairLog:
    """One head's records of what happened to the pair."""

    def __init__(self, database: Database, source: str):
        self.db = database
        self.source = source[:64]
        self.outage: Outage | None = None

    def record(self, kind: str, message: str) -> bool:
        try:
            with self.db.session() as session:
                session.add(ClusterEvent(kind=kind, source=self.source, message=message[:2000]))
        except ClusterMgrError as exc:
            self.database_fault(str(exc))
            return False
        self.database_reached()
        return True

    def database_fault(self, line: str) -> bool:
        """A database error met by a cycle or a job; True for the outage's first (the
        caller says it in one line), False while the same outage goes on."""
        if self.outage is not None:
            return False
        self.outage = Outage(line, time.time(), time.monotonic())
        return True

    def database_reached(self) -> None:
        """The database answered: an outage this head met is over, and recorded."""
        outage, self.outage = self.outage, None
        if outage is None:
            return
        lasted = time.monotonic() - outage.since_mono
        since = datetime.fromtimestamp(outage.since, UTC)
        message = (
            f"database unreachable for {lasted:.0f} s (from {since:%Y-%m-%d %H:%M:%S} UTC): "
            f"{outage.first_error}"
        )
        log.warning("database reachable again: %s", message)
        if not self.record(DATABASE, message):
            self.outage = outage  # still away after all: record it when it is back

    def config_seen(self, path: Path, why: str) -> None:
        """Record the configuration's digest when it differs from the last one this host
        recorded (a change between two starts, or by a reload)."""
        digest = config_digest(path)
        host = self.source.split("@", 1)[-1].rsplit(":", 1)[0]
        try:
            with self.db.session() as session:
                last = session.scalars(
                    select(ClusterEvent.message)
                    .where(
                        ClusterEvent.kind == CONFIG,
                        ClusterEvent.source.like(f"cm-scale@{host}:%"),
                    )
                    .order_by(ClusterEvent.at.desc(), ClusterEvent.id.desc())
                    .limit(1)
                ).first()
        except ClusterMgrError as exc:
            log.warning("configuration change not recorded: %s", exc)
            return
        was = last.rsplit("sha256:", 1)[-1].split()[0] if last and "sha256:" in last else None
        if was == digest:
            return
        before = f" (was sha256:{was})" if was else " (first recorded)"
        self.record(CONFIG, f"{why}: {path} sha256:{digest}{before}")


def config_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        return f"unreadable-{exc.errno}"

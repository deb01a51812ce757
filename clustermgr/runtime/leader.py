"""One actor at a time: a lease in the database, renewed while the leader lives, whose
generation fences every write a daemon makes.

The lease (table `leader_lease`, one row) names its holder and runs until `expires_at`, in
seconds on the database server's clock, so two heads never compare their own clocks. The
leader renews it from the heartbeat job and before every act step; a leader that stops
renewing (killed, frozen by SIGSTOP, cut off from the database) loses it when it runs out,
and a standby takes it at its next cycle with the generation one higher. A session that
hangs cannot keep it, as it kept the advisory lock alone.

Fencing: the daemon's writes go through `Database.fenced(lock.fence)`, whose every
transaction checks, just before its commit and in the same transaction, that the lease is
still this holder's at this generation and unexpired (on PostgreSQL with a row share lock,
so a takeover waits for that commit and nothing commits after it). A leader that wakes from
a freeze after a takeover has its first write refused (`LeaseLostError`), and its guard
(`still_leader`, asked before each act step and each launch) says no before any cloud call.

A session lock speeds up the takeover after a crash: the leader also holds a PostgreSQL
advisory lock on a connection of its own (SQLite: an flock on a root-only file), and says
so in the lease (`locked`). A standby that gets that lock while the lease says its holder
had it knows the holder's process or session is gone and takes the lease at once, without
waiting for it to run out. A leader that took over from a frozen holder (which still held
the session lock) tries for it again at every renewal.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, literal_column, make_url, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from clustermgr.core.errors import DatabaseError
from clustermgr.core.secret import Secret
from clustermgr.db.database import Database, daemon_application_name, describe_db_error
from clustermgr.db.models import LeaderLease
from clustermgr.runtime.statedir import LEADER_DIR

log = logging.getLogger(__name__)

LOCK_FILE = "cm-scale.lock"
LEASE_ID = 1
# a lease that runs this much longer than a lease can was written by a clock since restarted
# (SQLite's monotonic clock after a reboot) or stepped back: it counts as run out
CLOCK_RESTARTED_S = 3600.0


class LeaseLostError(DatabaseError):
    """A fenced write refused: this daemon no longer holds the lease it acted under."""


class SessionLock(Protocol):
    """A lock the operating system or the database frees when its holder's process or
    session ends: the hint that lets a standby take over before the lease runs out."""

    def try_hold(self) -> bool: ...
    def holding(self) -> bool: ...
    def drop(self) -> None: ...


@dataclass(frozen=True)
class LeaseState:
    """The lease as one read of it saw it."""

    holder: str | None
    generation: int
    expires_in_s: float  # negative: ran out that long ago
    renewed_ago_s: float
    locked: bool

    @property
    def live(self) -> bool:
        return self.holder is not None and self.expires_in_s > 0


def db_now(database: Database) -> str:
    """SQL for the lease's clock, in seconds: PostgreSQL's server clock (since the epoch),
    which every head reads alike; with SQLite (one host) this host's monotonic clock, read
    now, which a step of the wall clock does not move (a reboot restarts it: a lease more
    than its length ahead counts as run out)."""
    if database.engine.dialect.name == "postgresql":
        return "extract(epoch from clock_timestamp())::float8"
    return f"{time.monotonic():.6f}"


def read_lease(conn: Connection | Session, now_sql: str) -> LeaseState | None:
    row = conn.execute(
        text(
            f"SELECT holder, generation, expires_at - {now_sql}, {now_sql} - renewed_at, locked "
            "FROM leader_lease WHERE id = :id"
        ),
        {"id": LEASE_ID},
    ).first()
    if row is None:
        return None
    return LeaseState(row[0], int(row[1]), float(row[2]), float(row[3]), bool(row[4]))


class Lease:
    """The lease row, taken, renewed and handed back by one daemon (`name`)."""

    def __init__(self, database: Database, name: str, lease_s: float, session_lock: SessionLock):
        self.db = database
        self.name = name[:128]
        self.lease_s = lease_s
        self.session_lock = session_lock
        self.generation: int | None = None  # set while this daemon holds the lease
        self.took_from: LeaseState | None = None  # what the last take replaced
        self.lost_why = ""  # why the last renewal failed
        self.unreachable: str | None = None  # the database's error while it is away
        self.unreachable_since: float | None = None  # time.time() of the first such error
        self._renewed_mono = 0.0
        self._one_at_a_time = threading.RLock()  # the heartbeat and a cycle both renew

    # --- the leader's side ---------------------------------------------------------------

    def try_acquire(self) -> bool:
        with self._one_at_a_time:
            return self._try_acquire()

    def _try_acquire(self) -> bool:
        if self.generation is not None:
            return self._renew()
        locked = self.session_lock.try_hold()
        now = db_now(self.db)
        sent = time.monotonic()
        try:
            with self.db.engine.begin() as conn:
                before = read_lease(conn, now)
                if before is None:
                    raise LookupError(
                        "the leader_lease table holds no lease: run `clustermgr db upgrade`"
                    )
                took = conn.execute(
                    text(
                        f"UPDATE leader_lease SET holder = :me, generation = generation + 1, "
                        f"acquired_at = {now}, renewed_at = {now}, expires_at = {now} + :ttl, "
                        f"locked = :locked WHERE id = :id AND (holder IS NULL "
                        f"OR expires_at <= {now} OR expires_at > {now} + :far "
                        "OR holder = :me OR (:locked AND locked))"
                    ),
                    {
                        "me": self.name,
                        "ttl": self.lease_s,
                        "far": self.lease_s + CLOCK_RESTARTED_S,
                        "locked": locked,
                        "id": LEASE_ID,
                    },
                )
                if took.rowcount != 1:
                    if locked:  # a holder that leads without it takes it at its renewal
                        self.session_lock.drop()
                    self._reached()
                    return False
                after = read_lease(conn, now)
        except (SQLAlchemyError, LookupError) as exc:
            self.session_lock.drop()
            self._unreachable(exc)
            return False
        self._reached()
        assert after is not None
        self.generation = after.generation
        self.took_from = before
        self._renewed_mono = sent
        return True

    def still_leader(self) -> bool:
        """Renew the lease (one round trip); False once it is not ours any more."""
        with self._one_at_a_time:
            return self._renew()

    def _renew(self) -> bool:
        if self.generation is None:
            return False
        locked = self.session_lock.holding() or self.session_lock.try_hold()
        now = db_now(self.db)
        sent = time.monotonic()
        try:
            with self.db.engine.begin() as conn:
                renewed = conn.execute(
                    text(
                        f"UPDATE leader_lease SET renewed_at = {now}, "
                        f"expires_at = {now} + :ttl, locked = :locked WHERE id = :id "
                        f"AND holder = :me AND generation = :gen AND expires_at > {now}"
                    ),
                    {
                        "me": self.name,
                        "gen": self.generation,
                        "ttl": self.lease_s,
                        "locked": locked,
                        "id": LEASE_ID,
                    },
                )
                if renewed.rowcount == 1:
                    self._renewed_mono = sent
                    self._reached()
                    return True
                seen = read_lease(conn, now)
        except SQLAlchemyError as exc:
            self._unreachable(exc, say=False)  # the daemon says the loss, in one line
            self.lost_why = f"database not reachable: {self.unreachable}"
            self._step_down()
            return False
        self._reached()
        self.lost_why = lost_reason(seen, self.generation)
        self._step_down()
        return False

    def valid_locally(self) -> bool:
        """Ours, and renewed less than a lease ago by this process's monotonic clock (which
        runs on while the process is frozen): no round trip, so it can be asked before
        every call. The time is taken before each renewal is sent, so it ends no later than
        the database's."""
        return self.generation is not None and time.monotonic() - self._renewed_mono < self.lease_s

    @contextmanager
    def kept(self, period_s: float) -> Iterator[None]:
        """Renewed every `period_s` by a thread of its own while the block runs (`cm-scale
        --once`, which has no heartbeat job): a long act step does not outlive the lease."""
        done = threading.Event()

        def renew() -> None:
            while not done.wait(period_s) and self.still_leader():
                pass

        thread = threading.Thread(target=renew, name="lease", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def release(self) -> None:
        """Hand the lease back (a clean stop): a standby takes it at its next cycle."""
        with self._one_at_a_time:
            self._release()

    def _release(self) -> None:
        if self.generation is not None:
            try:
                with self.db.engine.begin() as conn:
                    conn.execute(
                        text(
                            f"UPDATE leader_lease SET expires_at = {db_now(self.db)}, "
                            "locked = :false WHERE id = :id AND holder = :me AND generation = :gen"
                        ),
                        {"me": self.name, "gen": self.generation, "id": LEASE_ID, "false": False},
                    )
            except SQLAlchemyError as exc:
                log.warning("leader lease not handed back: %s", describe_db_error(self.db.url, exc))
        self._step_down()

    def fence(self, session: Session) -> None:
        """In a write's own transaction, just before its commit: refuse it unless the lease
        is still ours, at our generation, and unexpired (a share lock on PostgreSQL holds
        off a takeover until this transaction ends)."""
        generation = self.generation
        held = generation is not None and (
            session.execute(
                select(LeaderLease.id)
                .where(
                    LeaderLease.id == LEASE_ID,
                    LeaderLease.holder == self.name,
                    LeaderLease.generation == generation,
                    LeaderLease.expires_at > literal_column(db_now(self.db)),
                )
                .with_for_update(read=True)
            ).first()
            is not None
        )
        if not held:
            raise LeaseLostError(
                f"not written: {self.name} no longer holds the leader lease "
                f"(generation {generation if generation is not None else '-'})"
            )

    def holder(self) -> str:
        try:
            with self.db.engine.connect() as conn:
                state = read_lease(conn, db_now(self.db))
        except SQLAlchemyError:
            return "another head (the lease could not be read)"
        return describe_lease(state)

    def _step_down(self) -> None:
        self.generation = None
        self.session_lock.drop()

    def _unreachable(self, exc: BaseException, say: bool = True) -> None:
        line = (
            str(describe_db_error(self.db.url, exc))
            if isinstance(exc, SQLAlchemyError)
            else str(exc).splitlines()[0]
        )
        self.unreachable = line
        if self.unreachable_since is None:
            self.unreachable_since = time.time()
        if say:
            log.warning("leader lease: database not reachable: %s", line)

    def _reached(self) -> None:
        self.unreachable = None


def lost_reason(seen: LeaseState | None, generation: int) -> str:
    if seen is None:
        return "the lease row is gone"
    if seen.generation != generation:
        return f"taken over by {describe_lease(seen)}"
    return f"it ran out {-seen.expires_in_s:.1f} s ago before it was renewed"


def describe_lease(state: LeaseState | None) -> str:
    if state is None or state.holder is None:
        return "nobody (no lease taken yet)"
    when = (
        f"lease runs {state.expires_in_s:.0f} s more"
        if state.live
        else f"lease ran out {-state.expires_in_s:.0f} s ago"
    )
    return f"{state.holder} (generation {state.generation}, {when})"


class FileLock:
    """SQLite's session lock: an exclusive flock on a file in a root-only directory
    (statedir.py), so no user can open it, let alone hold it. Freed by the kernel when
    the holder dies."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def try_hold(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def holding(self) -> bool:
        return self._fd is not None

    def drop(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class AdvisoryLock:
    """PostgreSQL's session lock: an advisory lock on a connection of its own, freed by the
    server when that session ends. Its key is random, made by migration 0009."""

    def __init__(self, url: str, password: Secret | None = None):
        parsed = make_url(url)
        parts = {
            "host": parsed.host,
            "port": str(parsed.port or 5432),
            "user": parsed.username,
            "dbname": parsed.database,
        }
        self.conninfo: dict[str, str] = {k: str(v) for k, v in parts.items() if v}
        # the password ([database] password_file, or the URL's own) stays masked until connect
        inline = Secret(parsed.password) if parsed.password else None
        self.password: Secret | None = password or inline
        self.key: int | None = None  # read from the database at the first attempt
        self._conn: Any = None
        self._held = False

    def try_hold(self) -> bool:
        import psycopg
        from psycopg.conninfo import make_conninfo

        if self._held and self._answers():
            return True
        self.drop()
        try:
            conn = psycopg.connect(
                make_conninfo(
                    **self.conninfo,
                    **({"password": self.password.reveal()} if self.password else {}),
                    application_name=daemon_application_name(),
                ),
                autocommit=True,
                connect_timeout=5,
            )
        except psycopg.Error:
            return False  # the lease's own query says why, in one line
        try:
            if self.key is None:
                self.key = read_lock_key(conn)
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except (psycopg.Error, LookupError) as exc:
            log.warning("leader session lock: %s", str(exc).splitlines()[0])
            conn.close()
            return False
        if got and got[0]:
            self._conn, self._held = conn, True
            return True
        conn.close()
        return False

    def holding(self) -> bool:
        return self._held and self._answers()

    def _answers(self) -> bool:
        import psycopg

        try:
            self._conn.execute("SELECT 1")
        except (psycopg.Error, AttributeError):
            self.drop()
            return False
        return True

    def drop(self) -> None:
        self._held = False
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception as exc:  # the connection may already be gone
                log.debug("closing the session lock's connection: %s", exc)
            self._conn = None


def read_lock_key(conn: Any) -> int:
    """The advisory-lock key: 63 random bits made once by migration 0009, readable only
    by roles that may read the clustermgr schema (docs/security.md, section state)."""
    row = conn.execute("SELECT lock_key FROM leader_lock WHERE id = 1").fetchone()
    if row is None:
        raise LookupError("the leader_lock table holds no key: run `clustermgr db upgrade`")
    return int(row[0])


def make_lock(database: Database, name: str, lease_s: float, state_dir: Path) -> Lease:
    """The lease, with PostgreSQL's advisory lock or SQLite's flock as its session lock.
    The flock file is beside the database file (in the state directory by default), so
    every daemon of that database shares it, whatever its state directory."""
    session_lock: SessionLock
    url = make_url(database.url)
    if database.engine.dialect.name == "postgresql":
        session_lock = AdvisoryLock(database.url, database.password)
    elif url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        session_lock = FileLock(Path(url.database).parent / LEADER_DIR / LOCK_FILE)
    else:
        session_lock = FileLock(state_dir / LEADER_DIR / LOCK_FILE)
    return Lease(database, name, lease_s, session_lock)

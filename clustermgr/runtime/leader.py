"""One actor at a time: a file lock with SQLite, an advisory lock with PostgreSQL.

The PostgreSQL lock lives on a dedicated connection outside the pool; `still_leader()`
re-checks it (the connection answers and the lock is still ours) before every act step,
so a daemon whose database session was killed stops acting at once and a standby on
another head node takes over.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import make_url

from clustermgr.runtime.statedir import LEADER_DIR

log = logging.getLogger(__name__)


class LeaderLock(Protocol):
    def try_acquire(self) -> bool: ...
    def still_leader(self) -> bool: ...
    def release(self) -> None: ...
    def holder(self) -> str: ...


LOCK_FILE = "cm-scale.lock"


class FileLock:
    """SQLite: an exclusive flock on a file in a root-only directory (statedir.py), so no
    user can open it, let alone hold it."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
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

    def still_leader(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def holder(self) -> str:
        """Who holds the lock, as far as the file says (the holder writes its pid)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            return f"{self.path} (unreadable: {exc.strerror})"
        try:
            pid = os.read(fd, 32).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
        return f"pid {pid} ({self.path})" if pid.isdigit() else f"{self.path} (no pid written)"


class PostgresAdvisoryLock:
    def __init__(self, url: str, cluster: str):
        self.cluster = cluster
        parsed = make_url(url)
        parts = {
            "host": parsed.host,
            "port": str(parsed.port or 5432),
            "user": parsed.username,
            "password": parsed.password,
            "dbname": parsed.database,
        }
        self.conninfo: dict[str, str] = {k: str(v) for k, v in parts.items() if v}
        self.key: int | None = None  # read from the database at the first attempt
        self._conn: Any = None

    def try_acquire(self) -> bool:
        import psycopg
        from psycopg.conninfo import make_conninfo

        if self._conn is not None and self.still_leader():
            return True
        self._drop()
        try:
            conn = psycopg.connect(
                make_conninfo(**self.conninfo, application_name=holder_name()),
                autocommit=True,
                connect_timeout=5,
            )
        except psycopg.Error as exc:
            log.warning("leader lock: database not reachable: %s", str(exc).splitlines()[0])
            return False
        try:
            if self.key is None:
                self.key = read_lock_key(conn)
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except (psycopg.Error, LookupError) as exc:
            log.warning("leader lock: %s", str(exc).splitlines()[0])
            conn.close()
            return False
        if got and got[0]:
            self._conn = conn
            return True
        conn.close()
        return False

    def still_leader(self) -> bool:
        import psycopg

        if self._conn is None or self.key is None:
            return False
        try:
            row = self._conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND pid = pg_backend_pid() AND classid = %s AND objid = %s AND objsubid = 1",
                ((self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF),
            ).fetchone()
        except psycopg.Error:
            self._drop()
            return False
        held = bool(row and row[0])
        if not held:
            self._drop()
        return held

    def release(self) -> None:
        self._drop()

    def holder(self) -> str:
        """The holding session's application_name (cm-scale@HOST:PID) and address, when
        this role may see them in pg_stat_activity."""
        import psycopg
        from psycopg.conninfo import make_conninfo

        if self.key is None:
            return "another session"
        query = (
            "SELECT a.application_name, a.client_addr FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.classid = %s AND l.objid = %s AND l.objsubid = 1 "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        try:
            with psycopg.connect(make_conninfo(**self.conninfo), connect_timeout=5) as conn:
                row = conn.execute(
                    query, ((self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF)
                ).fetchone()
        except psycopg.Error:
            return "another session"
        if not row:
            return "another session (gone now)"
        return f"{row[0] or 'a session'} from {row[1] or 'the local socket'}"

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception as exc:  # the connection may already be gone
                log.debug("closing leader connection: %s", exc)
            self._conn = None


def holder_name() -> str:
    return f"cm-scale@{socket.gethostname()}:{os.getpid()}"[:63]


def read_lock_key(conn: Any) -> int:
    """The advisory-lock key: 63 random bits made once by migration 0009, readable only
    by roles that may read the clustermgr schema (docs/security.md, section state)."""
    row = conn.execute("SELECT lock_key FROM leader_lock WHERE id = 1").fetchone()
    if row is None:
        raise LookupError("the leader_lock table holds no key: run `clustermgr db upgrade`")
    return int(row[0])


def make_lock(db_url: str, cluster: str, state_dir: Path) -> LeaderLock:
    if make_url(db_url).get_backend_name() == "postgresql":
        return PostgresAdvisoryLock(db_url, cluster)
    return FileLock(state_dir / LEADER_DIR / LOCK_FILE)

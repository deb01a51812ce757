"""One actor at a time: a file lock with SQLite, an advisory lock with PostgreSQL.

The PostgreSQL lock lives on a dedicated connection outside the pool; `still_leader()`
re-checks it (the connection answers and the lock is still ours) before every act step,
so a daemon whose database session was killed stops acting at once and a standby on
another head node takes over.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import make_url

log = logging.getLogger(__name__)


class LeaderLock(Protocol):
    def try_acquire(self) -> bool: ...
    def still_leader(self) -> bool: ...
    def release(self) -> None: ...


class FileLock:
    """SQLite: an exclusive flock on a file beside the state directory."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
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


def lock_key(cluster: str) -> int:
    """A stable signed 64-bit advisory-lock key per cluster name."""
    digest = hashlib.sha256(f"clustermgr:{cluster}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresAdvisoryLock:
    def __init__(self, url: str, cluster: str):
        parsed = make_url(url)
        parts = {
            "host": parsed.host,
            "port": str(parsed.port or 5432),
            "user": parsed.username,
            "password": parsed.password,
            "dbname": parsed.database,
        }
        self.conninfo: dict[str, str] = {k: str(v) for k, v in parts.items() if v}
        self.key = lock_key(cluster)
        self._conn: Any = None

    def try_acquire(self) -> bool:
        import psycopg
        from psycopg.conninfo import make_conninfo

        if self._conn is not None and self.still_leader():
            return True
        self._drop()
        try:
            conn = psycopg.connect(
                make_conninfo(**self.conninfo),
                autocommit=True,
                connect_timeout=5,
            )
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except psycopg.Error as exc:
            log.warning("leader lock: database not reachable: %s", str(exc).splitlines()[0])
            return False
        if got and got[0]:
            self._conn = conn
            return True
        conn.close()
        return False

    def still_leader(self) -> bool:
        import psycopg

        if self._conn is None:
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

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception as exc:  # the connection may already be gone
                log.debug("closing leader connection: %s", exc)
            self._conn = None


def make_lock(db_url: str, cluster: str, state_dir: Path) -> LeaderLock:
    if make_url(db_url).get_backend_name() == "postgresql":
        return PostgresAdvisoryLock(db_url, cluster)
    return FileLock(state_dir / "cm-scale.lock")

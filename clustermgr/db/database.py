"""Engine, sessions and the schema gate.

SQLite is the default (WAL, busy timeout, foreign keys); PostgreSQL by URL. Every failure
to reach or use the database becomes one DatabaseError line; the schema gate refuses to
run against a database whose Alembic revision is not this release's head.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from clustermgr.core import progress_marks
from clustermgr.core.errors import ConfigError, DatabaseError, SchemaOutOfDateError
from clustermgr.core.secret import Secret

# The newest migration's revision, checked without importing Alembic so the CLI and the
# Slurm hooks start fast. tests/integration/test_database.py keeps it equal to the head.
SCHEMA_HEAD = "0017_cycle_failures"


def migrations_dir() -> Path:
    """Where the Alembic scripts live: top-level migrations/, installed as clustermgr.migrations."""
    spec = importlib.util.find_spec("clustermgr.migrations")
    if spec is None or not spec.submodule_search_locations:
        raise DatabaseError("clustermgr.migrations is missing from this installation")
    return Path(next(iter(spec.submodule_search_locations)))


SYSTEM_DB_PATH = Path("/var/lib/clustermgr/clustermgr.db")


def default_db_path() -> Path:
    """Root's (and cm-scale's) database; an admin who may read it (`[daemon] admin_group`)
    reads the same one; anyone else gets a database of their own."""
    if os.geteuid() == 0 or os.access(SYSTEM_DB_PATH, os.R_OK):
        return SYSTEM_DB_PATH
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "clustermgr" / "clustermgr.db"


def resolve_db_url(cli_url: str | None, config_url: str | None) -> str:
    """--db, else $CLUSTERMGR_DB, else [database].url, else the default SQLite file."""
    return (
        cli_url or os.environ.get("CLUSTERMGR_DB") or config_url or f"sqlite:///{default_db_path()}"
    )


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable database URL>"


# PostgreSQL connections one cm-scale keeps at most: its pool (the cycle, the heartbeat and
# lease renewal, the director sync, the key server and cmsub's channel each hold one at a
# time) plus the leader's session lock. docs/reliability.md, "Connections".
DAEMON_POOL_SIZE = 5
DAEMON_CONNECTIONS = DAEMON_POOL_SIZE + 1
POOL_WAIT_S = 30.0


def make_engine(
    url: str,
    busy_timeout_s: float = 30.0,
    pool_size: int | None = None,
    password: Secret | None = None,
) -> Engine:
    """`pool_size` bounds a PostgreSQL pool (no overflow): the daemon's; the CLI's default
    pool opens one connection at a time. `password` (from [database] password_file or
    password_credential) joins the URL only inside the engine: `url` and messages never hold it."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"database URL {url.split(':', 1)[0]}:... is not a SQLAlchemy URL "
            "(expected sqlite:///PATH or postgresql+psycopg://USER@HOST/DB)"
        ) from None
    if password is not None:
        parsed = parsed.set(password=password.reveal())
    connect_args: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _ensure_sqlite_dir(Path(parsed.database))
        connect_args["timeout"] = busy_timeout_s
    elif parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        connect_args["connect_timeout"] = 10
    reader = _read_only_sqlite(parsed.database) if parsed.get_backend_name() == "sqlite" else None
    try:
        if reader is not None:
            engine = create_engine(
                "sqlite://", creator=lambda: reader(busy_timeout_s), pool_pre_ping=True
            )
        else:
            pool: dict[str, Any] = {}
            if pool_size is not None and parsed.get_backend_name() == "postgresql":
                pool = {"pool_size": pool_size, "max_overflow": 0, "pool_timeout": POOL_WAIT_S}
                # the daemon's sessions say whose they are in pg_stat_activity
                connect_args["application_name"] = daemon_application_name()
            engine = create_engine(parsed, connect_args=connect_args, pool_pre_ping=True, **pool)
    except (NoSuchModuleError, ImportError) as exc:
        raise ConfigError(
            f"database {redact(url)}: driver not available ({exc}); "
            "for PostgreSQL: pip install 'clustermgr[postgres]'"
        ) from None
    if parsed.get_backend_name() == "sqlite":
        _sqlite_pragmas(engine, busy_timeout_s)
    return engine


def daemon_application_name() -> str:
    return f"cm-scale@{socket.gethostname()}:{os.getpid()}"[:63]


def _ensure_sqlite_dir(path: Path) -> None:
    """The directory, and a new database file created 0600 (SQLite would make it by the
    umask, often 0644: every user could read it). SQLite gives its -wal and -shm files the
    database file's owner and mode; cm-scale opens the group read (statedir.py)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(
            f"database {path}: cannot create directory {path.parent}: {exc.strerror}"
        ) from None
    with contextlib.suppress(OSError):  # it exists, or SQLite reports why it cannot
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


def _read_only_sqlite(database: str | None) -> Callable[[float], Any] | None:
    """For who may read the database but not write it (an admin in `[daemon] admin_group`):
    a read-only connection. With cm-scale running it reads through the live WAL; when no
    -wal file is there (nobody has the database open) it cannot be created in root's
    directory, so the file is read as it stands (immutable: every change is in it)."""
    import sqlite3

    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    path = Path(database)
    if not path.exists() or os.access(path, os.W_OK) or not os.access(path, os.R_OK):
        return None

    def connect(timeout_s: float) -> sqlite3.Connection:
        flags = "mode=ro" if Path(f"{path}-wal").exists() else "mode=ro&immutable=1"
        uri = f"file:{quote(str(path.resolve()))}?{flags}"
        return sqlite3.connect(uri, uri=True, timeout=timeout_s, check_same_thread=False)

    return connect


def _sqlite_pragmas(engine: Engine, busy_timeout_s: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            with contextlib.suppress(Exception):  # a read-only file keeps its journal mode
                cursor.execute("PRAGMA journal_mode = WAL")
        finally:
            cursor.close()


def describe_db_error(url: str, exc: BaseException) -> DatabaseError:
    """One line for any SQLAlchemy/DBAPI failure, without the password or a traceback."""
    detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
    if "readonly database" in detail or "read-only" in detail:
        return DatabaseError(
            f"database {redact(url)} is read-only: check file and directory permissions"
        )
    if any(mark in detail for mark in CONNECTIONS_USED_UP):
        return DatabaseError(
            f"database {redact(url)} refused the connection: its max_connections is used up "
            f"({detail}); each cm-scale keeps up to {DAEMON_CONNECTIONS} connections and each "
            "clustermgr command one (docs/reliability.md, Connections)"
        )
    if "QueuePool limit" in detail:
        return DatabaseError(
            f"database {redact(url)}: all {DAEMON_POOL_SIZE} of this daemon's connections "
            f"stayed busy for {POOL_WAIT_S:.0f} s"
        )
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return DatabaseError(f"database {redact(url)}: connection lost: {detail}")
    return DatabaseError(f"database {redact(url)}: {detail}")


# PostgreSQL's words when no connection slot is left (src/backend/utils/init/postinit.c)
CONNECTIONS_USED_UP = (
    "too many clients already",
    "remaining connection slots are reserved",
)


class Database:
    """An engine plus a session factory, with every error turned into one line.

    `fenced(check)` gives a view of the same engine whose every transaction runs `check`
    just before its commit, in that transaction: the daemon's writes, checked against the
    leader lease (runtime/leader.py), so a leader that lost it writes nothing."""

    def __init__(
        self,
        url: str,
        busy_timeout_s: float = 30.0,
        pool_size: int | None = None,
        password: Secret | None = None,
    ):
        self.url = url  # as configured: without a password kept apart
        self.password = password
        self.engine = make_engine(url, busy_timeout_s, pool_size, password)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._fence: Callable[[Session], None] | None = None

    def fenced(self, check: Callable[[Session], None]) -> Database:
        view = copy.copy(self)
        view._fence = check
        return view

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: commit on success, roll back on any error."""
        session = self._sessions()
        try:
            yield session
            if self._fence is not None:
                self._fence(session)
            session.commit()
            progress_marks.beat()
        except SQLAlchemyError as exc:
            session.rollback()
            if _is_stale(exc):
                raise
            raise describe_db_error(self.url, exc) from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def current_revision(self) -> str | None:
        """The Alembic revision stamped in the database (a plain query: no Alembic import)."""
        from sqlalchemy import inspect, text

        try:
            with self.engine.connect() as conn:
                if not inspect(conn).has_table("alembic_version"):
                    return None
                rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars()
                revisions = list(rows)
        except SQLAlchemyError as exc:
            raise describe_db_error(self.url, exc) from exc
        if len(revisions) > 1:
            raise SchemaOutOfDateError(
                f"database {redact(self.url)} has several schema heads {revisions}: "
                "it was migrated by an unrelated tool"
            )
        return revisions[0] if revisions else None

    def require_current_schema(self) -> None:
        """Refuse to work on a database that is not at this release's schema head."""
        current = self.current_revision()
        if current == SCHEMA_HEAD:
            return
        head = head_revision()
        if current is None:
            raise SchemaOutOfDateError(
                f"database {redact(self.url)} has no clustermgr schema: run `clustermgr db upgrade`"
            )
        if current not in known_revisions():
            raise SchemaOutOfDateError(
                f"database {redact(self.url)} is at revision {current}, newer than this "
                f"clustermgr knows (head {head}): upgrade clustermgr"
            )
        raise SchemaOutOfDateError(
            f"database {redact(self.url)} schema is at {current}, this clustermgr needs {head}: "
            "run `clustermgr db upgrade`"
        )

    def upgrade(self) -> tuple[str | None, str]:
        """Apply every pending migration; returns (revision before, revision after)."""
        from alembic import command

        before = self.current_revision()
        try:
            with self.engine.begin() as conn:
                cfg = alembic_config()
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        except SQLAlchemyError as exc:
            raise describe_db_error(self.url, exc) from exc
        return before, head_revision()

    def dispose(self) -> None:
        self.engine.dispose()


def _is_stale(exc: BaseException) -> bool:
    from sqlalchemy.orm.exc import StaleDataError

    return isinstance(exc, StaleDataError)


def alembic_config() -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def _script() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    head: str = _script().get_current_head()
    return head


def known_revisions() -> set[str]:
    return {rev.revision for rev in _script().walk_revisions()}

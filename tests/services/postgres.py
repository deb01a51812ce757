"""A throwaway PostgreSQL server for the tests: Debian's binaries, a data directory under a
temporary directory, a free loopback port, started and stopped by pid.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the
`postgres` user that Debian's package creates (or as the current user otherwise).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.labs.slurmlab import free_port
from tests.services.processes import stop_group

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
START_TIMEOUT_S = 30.0
INITDB_ARGS = ("-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
# throwaway data: durability is not wanted, speed is
SERVER_ARGS = ("-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200")


class PostgresUnavailable(Exception):
    """The server cannot be started here; the message says what is missing."""


@dataclass(frozen=True)
class PrivatePostgres:
    host: str
    port: int
    user: str
    pid: int
    workdir: Path

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname}"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{dbname}"


def pg_bin_dir() -> Path | None:
    found = sorted(glob.glob(PG_BIN_GLOB), key=lambda p: int(Path(p).parent.name or 0))
    for candidate in reversed(found):
        if os.access(os.path.join(candidate, "initdb"), os.X_OK):
            return Path(candidate)
    return None


def start(bin_dir: Path | None = None, settings: tuple[str, ...] = ()) -> PrivatePostgres:
    """initdb + postgres on a free port; raises PostgresUnavailable with the reason.
    `settings` are more `-c name=value` arguments (the last one of a name wins)."""
    bin_dir = bin_dir or pg_bin_dir()
    if bin_dir is None:
        raise PostgresUnavailable(
            f"no PostgreSQL server binaries under {PG_BIN_GLOB} (install Debian's postgresql)"
        )
    as_user: dict[str, object] = {}
    workdir = Path(tempfile.mkdtemp(prefix="cm-pg-"))
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(workdir, ignore_errors=True)
            raise PostgresUnavailable("running as root and there is no `postgres` user") from None
        os.chown(workdir, owner.pw_uid, owner.pw_gid)
        as_user = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
    data = workdir / "data"
    init = subprocess.run(
        [str(bin_dir / "initdb"), *INITDB_ARGS, "-D", str(data)],
        capture_output=True,
        text=True,
        check=False,
        cwd=workdir,
        **as_user,  # type: ignore[call-overload]
    )
    if init.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-500:]}")
    return _serve(bin_dir, workdir, free_port(), as_user, settings)


def restart(server: PrivatePostgres) -> PrivatePostgres:
    """Start a server halted by `stop(server, keep=True)` again: same data, same port."""
    bin_dir = pg_bin_dir()
    assert bin_dir is not None
    as_user: dict[str, object] = {}
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        as_user = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
    return _serve(bin_dir, server.workdir, server.port, as_user)


def _serve(
    bin_dir: Path,
    workdir: Path,
    port: int,
    as_user: dict[str, object],
    settings: tuple[str, ...] = (),
) -> PrivatePostgres:
    data = workdir / "data"
    socket_dir = ("-k", f"{workdir}")
    log = open(workdir / "postgres.log", "ab")  # noqa: SIM115 - the server's, closed below
    try:
        server = subprocess.Popen(
            [
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                f"{port}",
                *socket_dir,
                *SERVER_ARGS,
                *(arg for setting in settings for arg in ("-c", setting)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=workdir,
            **as_user,  # type: ignore[call-overload]
        )
    finally:
        log.close()
    found = PrivatePostgres("127.0.0.1", port, "postgres", server.pid, workdir)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            tail = (workdir / "postgres.log").read_text(errors="replace")[-800:]
            shutil.rmtree(workdir, ignore_errors=True)
            raise PostgresUnavailable(f"postgres exited ({server.returncode}): {tail}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            if _accepts(found):
                return found
        time.sleep(0.1)
    stop(found)
    raise PostgresUnavailable(f"postgres did not accept connections in {START_TIMEOUT_S:.0f} s")


def _accepts(server: PrivatePostgres) -> bool:
    import psycopg

    try:
        with psycopg.connect(server.dsn(), connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def stop(server: PrivatePostgres, keep: bool = False) -> None:
    """Fast shutdown by pid (the postmaster's group: it and its children), then remove its
    directory unless `keep` (a server to `restart`)."""
    stop_group(server.pid, signal.SIGINT, 15)
    if not keep:
        shutil.rmtree(server.workdir, ignore_errors=True)


@contextlib.contextmanager
def role_with_password(server: PrivatePostgres, password: str) -> Iterator[str]:
    """A new role with `password` and a database of its own (both named as the role), which
    the server asks for that password over TCP (scram-sha-256: the server's other roles keep
    trust); the rule, the database and the role removed afterwards. Yields the role's name."""
    import psycopg

    role = f"cmpw_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        conn.execute(f"CREATE DATABASE {role} OWNER {role}")
    hba = server.workdir / "data" / "pg_hba.conf"
    before = hba.read_text()
    hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n{before}")
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield role
    finally:
        hba.write_text(before)
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"DROP DATABASE IF EXISTS {role} WITH (FORCE)")
            conn.execute(f"DROP ROLE IF EXISTS {role}")

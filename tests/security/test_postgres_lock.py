"""The PostgreSQL leader lock against a local user, on a server set up as docs/security.md
says (section state): passwords for every role, the clustermgr database owned by the
clustermgr role, CONNECT revoked from PUBLIC. The attacker is `cmsec-mallory`, who has a
login role of her own on the same server (a site's server often holds other databases)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.db.database import Database
from clustermgr.runtime.leader import make_lock
from tests.conftest import cannot_run, run_cli
from tests.security.conftest import Accounts, as_user
from tests.services import postgres

SUPER_PASSWORD = "cmsec-super-pw"
OWNER_PASSWORD = "cmsec-owner-pw"
MALLORY_PASSWORD = "cmsec-mallory-pw"
DATABASE = "clustermgr"
CLUSTER = "lab"  # the cluster name the old key was derived from


@dataclass(frozen=True)
class SiteServer:
    server: postgres.PrivatePostgres
    psql: Path

    def url(self, role: str, password: str, dbname: str = DATABASE) -> str:
        host, port = self.server.host, self.server.port
        return f"postgresql+psycopg://{role}:{password}@{host}:{port}/{dbname}"

    def dsn(self, dbname: str = DATABASE) -> str:
        return (
            f"host={self.server.host} port={self.server.port} user=postgres "
            f"password={SUPER_PASSWORD} dbname={dbname}"
        )


def _superuser_sql(server: postgres.PrivatePostgres, *statements: str, dbname: str) -> None:
    import psycopg

    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]  # fixed test SQL


@pytest.fixture(scope="module")
def site_server(accounts: Accounts) -> Iterator[SiteServer]:
    bin_dir = postgres.pg_bin_dir()
    if bin_dir is None or not Path("/usr/bin/psql").exists():
        cannot_run("PostgreSQL's server and psql are needed (Debian's postgresql)")
    try:
        server = postgres.start()
    except postgres.PostgresUnavailable as exc:
        cannot_run(f"PostgreSQL: {exc}")
        raise
    try:
        _superuser_sql(
            server,
            f"ALTER ROLE postgres PASSWORD '{SUPER_PASSWORD}'",
            f"CREATE ROLE clustermgr LOGIN PASSWORD '{OWNER_PASSWORD}'",
            f"CREATE ROLE cmsec_mallory LOGIN PASSWORD '{MALLORY_PASSWORD}'",
            f"CREATE DATABASE {DATABASE} OWNER clustermgr",
            f"REVOKE CONNECT, TEMPORARY ON DATABASE {DATABASE} FROM PUBLIC",
            dbname="postgres",
        )
        # what docs/security.md asks of pg_hba.conf: a password for every role, no trust
        hba = server.workdir / "data" / "pg_hba.conf"
        hba.write_text(
            "local all all scram-sha-256\nhost all all 127.0.0.1/32 scram-sha-256\n"
            "host all all ::1/128 scram-sha-256\n"
        )
        os.kill(server.pid, signal.SIGHUP)
        time.sleep(1.0)  # the postmaster rereads pg_hba.conf
        psql = Path("/usr/bin/psql")
        yield SiteServer(server, psql)
    finally:
        postgres.stop(server)


@pytest.fixture(scope="module")
def upgraded(site_server: SiteServer) -> str:
    """`clustermgr db upgrade` as root, with the clustermgr role's URL (the config's)."""
    url = site_server.url("clustermgr", OWNER_PASSWORD)
    done = run_cli("--db", url, "db", "upgrade")
    assert done.returncode == 0, done.stderr
    return url


def mallory_psql(site: SiteServer, role: str, password: str, dbname: str, sql: str) -> str:
    done = as_user(
        "cmsec-mallory",
        [
            str(site.psql),
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            site.server.host,
            "-p",
            str(site.server.port),
            "-U",
            role,
            "-d",
            dbname,
            "-Atc",
            sql,
        ],
        env={"PGPASSWORD": password, "PGCONNECT_TIMEOUT": "5"},
    )
    return f"rc={done.returncode} {done.stdout.strip()} {done.stderr.strip()}"


def test_a_user_cannot_connect_to_the_clustermgr_database(
    site_server: SiteServer, upgraded: str
) -> None:
    """Neither with her own role (CONNECT revoked) nor as clustermgr or the superuser
    (she has no password: no trust line)."""
    own = mallory_psql(site_server, "cmsec_mallory", MALLORY_PASSWORD, DATABASE, "SELECT 1")
    assert not own.startswith("rc=0") and "permission denied for database" in own, own
    for role in ("clustermgr", "postgres"):
        guessed = mallory_psql(site_server, role, "guess", DATABASE, "SELECT 1")
        assert not guessed.startswith("rc=0") and "password authentication failed" in guessed, (
            guessed
        )


def test_a_lock_taken_elsewhere_on_the_server_does_not_stop_the_leader(
    site_server: SiteServer, upgraded: str
) -> None:
    """She may hold any advisory lock in a database she can reach, the key derived from
    the cluster name (the old scheme) and even the real key included: advisory locks are
    per database, and the leader's key is a random one only the clustermgr role reads."""
    import hashlib

    old_key = int.from_bytes(
        hashlib.sha256(f"clustermgr:{CLUSTER}".encode()).digest()[:8], "big", signed=True
    )
    import psycopg

    with psycopg.connect(site_server.dsn()) as conn:
        real_key = int(conn.execute("SELECT lock_key FROM leader_lock").fetchone()[0])  # type: ignore[index]
    assert real_key != old_key
    holder = subprocess.Popen(
        [
            "/usr/sbin/runuser",
            "-u",
            "cmsec-mallory",
            "--",
            str(site_server.psql),
            "-X",
            "-h",
            site_server.server.host,
            "-p",
            str(site_server.server.port),
            "-U",
            "cmsec_mallory",
            "-d",
            "postgres",
            "-c",
            f"SELECT pg_advisory_lock({old_key}), pg_advisory_lock({real_key})",
            "-c",
            "SELECT pg_sleep(6)",
        ],
        env={"PATH": "/usr/bin:/bin", "PGPASSWORD": MALLORY_PASSWORD},
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        held = 0
        deadline = time.monotonic() + 5
        while held < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            with psycopg.connect(site_server.dsn("postgres")) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND a.usename = 'cmsec_mallory'"
                ).fetchone()
            held = int(row[0]) if row else 0
        assert held == 2, "mallory's session did not take both advisory locks"
        database = Database(upgraded)
        lock = make_lock(database, "cm-scale@test:1", 20.0, Path("/nonexistent"))
        try:
            assert lock.try_acquire()
            assert lock.session_lock.key == real_key  # type: ignore[attr-defined]
            assert lock.session_lock.holding()
            assert lock.still_leader()
        finally:
            lock.release()
            database.dispose()
    finally:
        holder.kill()
        holder.wait()


def test_a_role_granted_connect_cannot_read_the_key(site_server: SiteServer, upgraded: str) -> None:
    """A site that lets a reporting role connect still keeps the key from it: the
    leader_lock table is the clustermgr role's, with no grant to anyone; nor may it write
    the lease (leader_lease), which would make it the leader."""
    import psycopg

    with psycopg.connect(site_server.dsn("postgres"), autocommit=True) as conn:
        conn.execute(f"GRANT CONNECT ON DATABASE {DATABASE} TO cmsec_mallory")  # type: ignore[arg-type]
    try:
        read = mallory_psql(
            site_server, "cmsec_mallory", MALLORY_PASSWORD, DATABASE, "SELECT * FROM leader_lock"
        )
        assert not read.startswith("rc=0") and "permission denied" in read, read
        steal = mallory_psql(
            site_server,
            "cmsec_mallory",
            MALLORY_PASSWORD,
            DATABASE,
            "UPDATE leader_lease SET holder = 'mallory', expires_at = 1e12",
        )
        assert not steal.startswith("rc=0") and "permission denied" in steal, steal
    finally:
        with psycopg.connect(site_server.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"REVOKE CONNECT ON DATABASE {DATABASE} FROM cmsec_mallory")  # type: ignore[arg-type]

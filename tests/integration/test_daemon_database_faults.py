"""A real cm-scale against a PostgreSQL server of the test's own that shuts down under it,
and one whose connection slots run out (docs/reliability.md, "Connections" and the fault
table). Slurm is absent (every cycle fails to observe, in one line), which leaves the
database's own lines to count."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from clustermgr.db.database import DAEMON_CONNECTIONS, Database
from tests.conftest import cannot_run
from tests.services import postgres
from tests.services.postgres import PrivatePostgres

INTERVAL = 1.0
BIN = Path(sys.executable).parent
SMALL_MAX_CONNECTIONS = 9  # one head (6) and the test's own connection, two to spare

CONFIG = """
[cluster]
name = "dbfault"
[database]
url = "{db}"
[slurm]
bin_dir = "{tmp}/no-slurm"
[daemon]
interval_s = {interval}
reconcile_interval_s = 600
state_dir = "{tmp}/state"
metrics_port = 0
lease_s = 3
"""


def own_server(settings: tuple[str, ...] = ()) -> PrivatePostgres:
    try:
        return postgres.start(settings=settings)
    except postgres.PostgresUnavailable as exc:
        cannot_run(f"PostgreSQL: {exc}")
        raise


@pytest.fixture
def server() -> Iterator[list[PrivatePostgres]]:
    """A server this test may stop; the list holds the running one (restart replaces it)."""
    servers = [own_server(("max_connections=" + str(SMALL_MAX_CONNECTIONS),))]
    try:
        yield servers
    finally:
        postgres.stop(servers[-1])


def start_daemon(tmp_path: Path, url: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    database = Database(url)
    database.upgrade()
    database.dispose()
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(db=url, tmp=tmp_path, interval=INTERVAL))
    log = tmp_path / "d.log"
    proc = subprocess.Popen(
        [str(BIN / "cm-scale"), "--skip-slurm-check", "--config", str(config)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return proc, config, log


def stop_daemon(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def wait_for(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def leads(log: Path, after: int = 0) -> bool:
    return " cycle: " in log.read_text(errors="replace")[after:]


def clustermgr(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "clustermgr"), "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_server_shutting_down_is_one_line_a_cycle_and_an_outage_event(
    tmp_path: Path, server: list[PrivatePostgres]
) -> None:
    url = server[0].url()
    proc, config, log = start_daemon(tmp_path, url)
    try:
        assert wait_for(lambda: leads(log), 30), log.read_text()
        offset = len(log.read_text())
        with psycopg.connect(server[0].dsn(), autocommit=True) as admin:
            os.kill(server[0].pid, signal.SIGTERM)  # smart shutdown: new sessions refused
            time.sleep(0.5)
            # the daemon's sessions end (as a failover or an admin ends them): every
            # connection it opens now meets "the database system is shutting down"
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'cm-scale@%%'"
            )
            time.sleep(4 * INTERVAL)
        postgres.stop(server[0], keep=True)  # then fast: every session ended
        down_at = time.monotonic()
        time.sleep(4 * INTERVAL)
        server.append(postgres.restart(server[0]))
        down_s = time.monotonic() - down_at
        after = len(log.read_text())
        assert wait_for(lambda: leads(log, after), 60), log.read_text()[after:]
        said = log.read_text(errors="replace")[offset:after]
        assert "Traceback" not in said, said[-3000:]
        faults = [
            line
            for line in said.splitlines()
            if re.search(
                r"shutting down|terminating connection|not reachable|Connection refused|connection",
                line,
            )
        ]
        assert any("the database system is shutting down" in line for line in faults), said
        # one line a cycle at most (and the one that says the lease was lost)
        cycles = 8 * INTERVAL / INTERVAL
        assert len(faults) <= cycles + 3, "\n".join(faults)
        assert all(len(line) < 600 for line in faults), faults
        events = json.loads(clustermgr(config, "events", "--cluster", "--json").stdout)
        outages = [e for e in events if e["kind"] == "database"]
        assert outages, events
        assert outages[-1]["source"].startswith("cm-scale@")
        lasted = float(re.search(r"unreachable for (\d+) s", outages[-1]["message"])[1])  # type: ignore[index]
        assert 1 <= lasted <= down_s + 8 * INTERVAL, outages[-1]
    finally:
        stop_daemon(proc)


def test_a_head_keeps_within_its_connections_and_a_refused_one_is_named(
    tmp_path: Path, server: list[PrivatePostgres]
) -> None:
    url = server[0].url()
    proc, config, log = start_daemon(tmp_path, url)
    hogs: list[psycopg.Connection[tuple[object, ...]]] = []
    try:
        assert wait_for(lambda: leads(log), 30), log.read_text()
        time.sleep(3 * INTERVAL)
        with psycopg.connect(server[0].dsn(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                (f"cm-scale@%:{proc.pid}",),
            ).fetchone()
        used = int(row[0]) if row else 0
        assert 1 <= used <= DAEMON_CONNECTIONS, used
        fits = clustermgr(config, "status")  # an admin command still fits
        assert fits.returncode in (0, 1) and fits.stderr == "", fits  # 1: cycles fail, no Slurm
        assert "failed cycles: " in fits.stdout or fits.returncode == 0, fits
        while True:  # take every slot left
            try:
                hogs.append(psycopg.connect(server[0].dsn(), autocommit=True))
            except psycopg.OperationalError:
                break
        done = clustermgr(config, "status")
        assert done.returncode == 1, done
        [line] = done.stderr.strip().splitlines()
        assert "refused the connection: its max_connections is used up" in line, line
        assert f"each cm-scale keeps up to {DAEMON_CONNECTIONS} connections" in line, line
        assert proc.poll() is None
    finally:
        for conn in hogs:
            conn.close()
        stop_daemon(proc)
    assert "Traceback" not in log.read_text()

"""Two real cm-scale processes against the real PostgreSQL: one leads, one stands by.

Slurm is deliberately absent here (bin_dir points nowhere): every cycle fails to observe,
but a leader still runs (and records) its cycles, which is what leadership is about.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import select

from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent
from tests.services.postgres import PrivatePostgres

INTERVAL = 1.0

CONFIG = """
[cluster]
name = "ha-{token}"
[database]
url = "{db}"
[slurm]
bin_dir = "{tmp}/no-slurm"
[daemon]
interval_s = {interval}
reconcile_interval_s = 600
state_dir = "{state}"
metrics_port = 0
"""


def start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).with_name("cm-scale")
    handle = log.open("wb")
    return subprocess.Popen(
        [str(exe), "--skip-slurm-check", "--config", str(config)],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, "CLUSTERMGR_CONFIG": str(config)},
    )


def actors_since(database: Database, since: float) -> list[str]:
    with database.session() as session:
        rows = session.scalars(select(ClusterEvent).where(ClusterEvent.kind == "cycle"))
        return [r.source for r in rows if r.at.timestamp() >= since]


def wait_for(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def pair(
    postgres_url: str, tmp_path: Path
) -> Iterator[tuple[Database, list[subprocess.Popen[bytes]], list[Path]]]:
    database = Database(postgres_url)
    database.upgrade()
    procs, logs = [], []
    for i in range(2):
        state = tmp_path / f"state{i}"  # two head nodes: separate state directories
        config = tmp_path / f"c{i}.toml"
        config.write_text(
            CONFIG.format(
                token=tmp_path.name[-8:],
                db=postgres_url,
                tmp=tmp_path,
                interval=INTERVAL,
                state=state,
            )
        )
        logs.append(tmp_path / f"d{i}.log")
        procs.append(start(config, logs[-1]))
        time.sleep(1.5 if i == 0 else 0)  # the first one becomes the leader
    try:
        yield database, procs, logs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        database.dispose()


def source_of(proc: subprocess.Popen[bytes]) -> str:
    return f"cm-scale@{os.uname().nodename}:{proc.pid}"


def test_standby_takes_over_when_the_leader_dies(
    pair: tuple[Database, list[subprocess.Popen[bytes]], list[Path]],
) -> None:
    database, (leader, standby), _logs = pair
    start_at = time.time()
    assert wait_for(lambda: source_of(leader) in actors_since(database, start_at), 10)
    time.sleep(3 * INTERVAL)
    assert source_of(standby) not in actors_since(database, start_at), "two leaders"
    leader.kill()
    leader.wait(10)
    killed_at = time.time()
    assert wait_for(
        lambda: source_of(standby) in actors_since(database, killed_at), 2 * INTERVAL + 5
    )


def test_leader_whose_session_is_killed_stops_acting(
    pair: tuple[Database, list[subprocess.Popen[bytes]], list[Path]],
    postgres_url: str,
    postgres_server: PrivatePostgres,
) -> None:
    database, (leader, standby), logs = pair
    start_at = time.time()
    assert wait_for(lambda: source_of(leader) in actors_since(database, start_at), 10)
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        killed = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
            "AND granted AND database = (SELECT oid FROM pg_database WHERE datname = %s)",
            (postgres_url.rsplit("/", 1)[1],),
        ).fetchall()
    assert killed == [(True,)]
    cut = time.time()
    assert wait_for(lambda: source_of(standby) in actors_since(database, cut), 2 * INTERVAL + 5)
    time.sleep(1.5)  # the old leader's in-flight cycle (if any) has ended by now
    settle = time.time()
    time.sleep(4 * INTERVAL)
    assert source_of(leader) not in actors_since(database, settle)
    assert leader.poll() is None  # still alive, standing by
    assert "lost the leader lock" in logs[0].read_text()


def test_a_metrics_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """Another exporter (or a second cm-scale) on the metrics port: cm-scale says where and
    what to set, exits 1, and leaves no traceback."""
    database = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    database.upgrade()
    database.dispose()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "c.toml"
        config.write_text(
            CONFIG.format(
                token=tmp_path.name[-8:],
                db=f"sqlite:///{tmp_path / 'cm.db'}",
                tmp=tmp_path,
                interval=INTERVAL,
                state=tmp_path / "state",
            ).replace("metrics_port = 0", f'metrics_port = {port}\nmetrics_address = "127.0.0.1"')
        )
        log = tmp_path / "d.log"
        proc = start(config, log)
        assert proc.wait(timeout=60) == 1
    said = log.read_text()
    assert "Traceback" not in said, said
    [line] = [ln for ln in said.splitlines() if "metrics endpoint" in ln]
    assert f"127.0.0.1:{port}" in line and "set [daemon] metrics_port" in line, line

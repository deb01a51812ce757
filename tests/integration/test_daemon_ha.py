"""Two real cm-scale processes against the real PostgreSQL: one leads, one stands by.

Slurm is deliberately absent here (bin_dir points nowhere): every cycle fails to observe,
but a leader still runs (and records) its cycles, which is what leadership is about.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import select, text

from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent
from tests.services.postgres import PrivatePostgres

INTERVAL = 1.0
LEASE_S = 3.0

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
lease_s = {lease}
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
                lease=LEASE_S,
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


def test_a_leader_whose_lock_session_is_killed_keeps_leading_alone(
    pair: tuple[Database, list[subprocess.Popen[bytes]], list[Path]],
    postgres_url: str,
    postgres_server: PrivatePostgres,
) -> None:
    """The lease, not a database session, says who leads: the leader's advisory-lock
    session killed by hand, it takes the lock back at its next renewal and goes on leading;
    the standby never acts (before the lease, a killed session handed leadership over)."""
    database, (leader, standby), _logs = pair
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
    time.sleep(4 * INTERVAL)
    seen = actors_since(database, cut)
    assert source_of(leader) in seen and source_of(standby) not in seen, seen
    assert wait_for(lambda: lease_row(database)[2], 5)  # the session lock is held again
    assert lease_row(database)[0] == source_of(leader)


def lease_row(database: Database) -> tuple[str | None, int, bool]:
    with database.engine.connect() as conn:
        row = conn.execute(text("SELECT holder, generation, locked FROM leader_lease")).one()
    return row[0], int(row[1]), bool(row[2])


def status(config: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("clustermgr")),
            "--config",
            str(config),
            "status",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def leads(code: int, shown: dict[str, Any], pid: int) -> bool:
    """`pid` leads; with Slurm absent its cycles fail, which is all status may hold against
    it (exit 1 then, as `status --check`; 0 before its first cycle's row)."""
    problem = shown["problem"]
    return (
        shown["daemon"] is not None
        and shown["daemon"]["pid"] == pid
        and (problem is None or problem.startswith("the last cycle failed"))
        and code == (0 if problem is None else 1)
    )


def roles(shown: dict[str, Any]) -> dict[int, str]:
    return {int(d["pid"]): str(d["role"]) for d in shown["daemons"]}


def cluster_events(config: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("clustermgr")),
            "--config",
            str(config),
            "events",
            "--cluster",
            "--json",
            "--since",
            "1h",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return list(json.loads(done.stdout))


def test_a_frozen_leader_is_replaced_when_its_lease_runs_out_and_writes_nothing_after(
    pair: tuple[Database, list[subprocess.Popen[bytes]], list[Path]], tmp_path: Path
) -> None:
    """SIGSTOP on the leader (its sessions stay open, its advisory lock held): the standby
    takes the lease within two cycles of its end; status shows one leader and the frozen
    head stale; woken by SIGCONT, the old leader writes nothing, says it lost the lease,
    and the pair's events name who saw what."""
    database, (leader, standby), logs = pair
    config = tmp_path / "c0.toml"
    start_at = time.time()
    assert wait_for(lambda: source_of(leader) in actors_since(database, start_at), 10)
    both = {leader.pid: "leader", standby.pid: "standby"}
    # the standby's first heartbeat row may come a moment after the leader's first cycle
    assert wait_for(lambda: roles(status(config)[1]) == both, 20), status(config)
    code, shown = status(config)
    assert leads(code, shown, leader.pid)
    os.kill(leader.pid, signal.SIGSTOP)
    frozen_at = time.time()
    try:
        assert wait_for(
            lambda: source_of(standby) in actors_since(database, frozen_at),
            LEASE_S + 2 * INTERVAL + 5,
        )
        took = min(
            e.at.timestamp() for e in cycle_events(database) if e.source == source_of(standby)
        )
        # the lease ran out at most LEASE_S after the freeze: taken within two cycles of that
        assert took - frozen_at <= LEASE_S + 2 * INTERVAL + 0.5, took - frozen_at
        holder, generation, _locked = lease_row(database)
        assert holder == source_of(standby) and generation >= 2
        assert wait_for(lambda: roles(status(config)[1]).get(leader.pid) == "stale", 15)
        code, shown = status(config)
        assert leads(code, shown, standby.pid)
        assert [d for d in shown["daemons"] if d["role"] == "leader"] == [shown["daemon"]]
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    woken_at = time.time()
    assert wait_for(lambda: "lost the leader lease" in logs[0].read_text(), 10)
    time.sleep(4 * INTERVAL)
    assert source_of(leader) not in actors_since(database, woken_at - 0.5)
    assert lease_row(database)[0] == source_of(standby)
    code, shown = status(config)
    assert leads(code, shown, standby.pid)
    assert roles(shown) == {leader.pid: "standby", standby.pid: "leader"}
    said = logs[0].read_text()
    assert "Traceback" not in said, said[-3000:]
    kinds = {(e["kind"], e["source"]) for e in cluster_events(config)}
    assert ("takeover", source_of(standby)) in kinds, kinds
    assert ("lease-lost", source_of(leader)) in kinds, kinds
    [took_event] = [
        e
        for e in cluster_events(config)
        if e["kind"] == "takeover" and e["source"] == source_of(standby)
    ]
    assert f"from {source_of(leader)}, whose lease ran out" in took_event["message"]


def cycle_events(database: Database) -> list[ClusterEvent]:
    with database.session() as session:
        return list(session.scalars(select(ClusterEvent).where(ClusterEvent.kind == "cycle")))


def test_status_exits_1_with_no_live_leader_and_shows_dead_heads_stale(
    pair: tuple[Database, list[subprocess.Popen[bytes]], list[Path]], tmp_path: Path
) -> None:
    database, (leader, standby), _logs = pair
    config = tmp_path / "c0.toml"
    start_at = time.time()
    assert wait_for(lambda: source_of(leader) in actors_since(database, start_at), 10)
    assert wait_for(lambda: roles(status(config)[1]).get(standby.pid) == "standby", 20)
    standby.kill()  # SIGKILL: no row says it stopped
    standby.wait(10)
    leader.send_signal(signal.SIGTERM)  # a clean stop hands the lease back
    assert leader.wait(30) == 0
    code, shown = status(config)
    assert code == 1 and shown["daemon"] is None and not shown["healthy"]
    assert not shown["lease"]["live"]
    assert wait_for(lambda: roles(status(config)[1]) == {standby.pid: "stale"}, 20), status(config)
    text_out = subprocess.run(
        [str(Path(sys.executable).with_name("clustermgr")), "--config", str(config), "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert text_out.returncode == 1
    assert text_out.stdout.startswith("cm-scale: NO LIVE LEADER"), text_out.stdout
    assert f"stale: {socket.gethostname()} pid {standby.pid}" in text_out.stdout


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
                lease=LEASE_S,
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


def test_a_reload_and_a_changed_configuration_are_events_with_the_head_that_saw_them(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'cm.db'}"
    database = Database(url)
    database.upgrade()
    config = tmp_path / "c.toml"
    text_before = CONFIG.format(
        token=tmp_path.name[-8:],
        db=url,
        tmp=tmp_path,
        interval=INTERVAL,
        lease=LEASE_S,
        state=tmp_path / "state",
    )
    config.write_text(text_before)
    log = tmp_path / "d.log"
    proc = start(config, log)
    try:
        assert wait_for(lambda: source_of(proc) in actors_since(database, 0), 30)
        config.write_text(
            text_before.replace("reconcile_interval_s = 600", "reconcile_interval_s = 300")
        )
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "configuration reloaded" in log.read_text(), 20)
        config.write_text("[cluster\n")  # a broken file: refused, the running one kept
        proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "reload refused" in log.read_text(), 20)
        pair_events = [
            (e["kind"], e["message"])
            for e in cluster_events(config_for(tmp_path, text_before))
            if e["kind"] in ("config", "reload", "takeover") and e["source"] == source_of(proc)
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        database.dispose()
    kinds = [kind for kind, _ in pair_events]
    # the first cycle (the takeover) and the start's config record race: either order
    assert sorted(kinds[:2]) == ["config", "takeover"] and kinds[2:] == [
        "reload",
        "config",
        "reload",
    ], pair_events
    configs = [message for kind, message in pair_events if kind == "config"]
    assert configs[0].startswith("configuration at start:"), configs
    assert configs[0].endswith("(first recorded)"), configs
    first_digest = configs[0].split("sha256:")[1].split()[0]
    assert configs[1].endswith(f"(was sha256:{first_digest})"), configs
    assert pair_events[-1][1].startswith("reload refused, the running config kept:")


def config_for(tmp_path: Path, text_of: str) -> Path:
    """A readable copy of the configuration for the CLI (the daemon's file is broken now)."""
    path = tmp_path / "cli.toml"
    path.write_text(text_of)
    return path

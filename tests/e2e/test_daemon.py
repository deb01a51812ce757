"""cm-scale as a real service process against a real slurmctld and the local cloud:
READY on NOTIFY_SOCKET, woken by the resume hook well before its interval, metrics that
a real Prometheus scrapes and every query of the Grafana dashboard answers, SIGHUP reload
(and refusal), clean SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, cannot_run
from tests.labs.burstlab import BurstLab, BurstLabSpec
from tests.labs.slurmlab import free_port
from tests.services.prometheus import Prometheus, PrometheusUnavailable
from tests.services.prometheus import running as prometheus_server

INTERVAL_S = 120  # far longer than the test waits: only the hook's poke can start a cycle


@pytest.fixture
def lab(lab_dir: Path) -> Iterator[BurstLab]:
    spec = BurstLabSpec(
        demand_mode="slurm",
        interval_s=INTERVAL_S,
        metrics_port=free_port(),
        subnet="10.213.11.0/24",
        policy_chain=[{"name": "idle_timeout", "options": {"minutes": 30}}],
        serve_munge_key=False,  # the daemon serves the munge key to the nodes it launches
    )
    made = BurstLab(lab_dir, spec)
    try:
        yield made.start()
    finally:
        made.stop()


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def node_states(lab: BurstLab) -> dict[str, str]:
    rows = json.loads(lab.clustermgr("nodes", "list", "--json").stdout)
    return {r["name"]: r["state"] for r in rows}


def dashboard_queries() -> list[str]:
    dashboard = json.loads((REPO / "etc" / "grafana" / "clustermgr-dashboard.json").read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def dashboard_metrics() -> set[str]:
    return {m for q in dashboard_queries() for m in re.findall(r"\bclustermgr_[a-z_]+", q)}


@pytest.fixture
def prometheus(lab: BurstLab) -> Iterator[Prometheus]:
    """Debian's Prometheus scraping the daemon's metrics port every second."""
    try:
        with prometheus_server([f"127.0.0.1:{lab.spec.metrics_port}"]) as server:
            yield server
    except PrometheusUnavailable as exc:
        cannot_run(str(exc))


def test_daemon_serves_wakes_reloads_and_stops(
    lab: BurstLab, tmp_path: Path, prometheus: Prometheus
) -> None:
    notify_path = tmp_path / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(30)
    log_path = lab.workdir / "daemon.log"
    with log_path.open("wb") as log:
        daemon = subprocess.Popen(
            [str(lab.bin_dir / "cm-scale")],
            env={**lab.env, "NOTIFY_SOCKET": str(notify_path)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        messages = [notify.recv(4096)]
        while b"READY=1" not in messages[-1]:
            messages.append(notify.recv(4096))  # WATCHDOG=1 / STATUS= may come too
        time.sleep(1)  # the first (startup) cycle has run; the next one is INTERVAL_S away
        job = lab.sbatch("--wrap", "hostname")
        woke = time.monotonic()
        wait_until(
            lambda: any(s in ("LAUNCHING", "BOOTING", "UP") for s in node_states(lab).values()),
            30,
            "the hook to wake the daemon",
        )
        assert time.monotonic() - woke < INTERVAL_S / 4
        wait_until(lambda: lab.job_field(job, "JobState") == "COMPLETED", 120, "the job")

        port = lab.spec.metrics_port
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        text = scrape.decode()
        assert 'clustermgr_launches_total{provider="local",template="local-gpu"} 1.0' in text
        assert "clustermgr_leader 1.0" in text
        samples = {
            line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"
        }
        missing = {m for m in dashboard_metrics() if not any(s.startswith(m) for s in samples)}
        assert not missing, f"dashboard queries name metrics the daemon does not export: {missing}"
        wait_until(  # enough scrapes for rate() and increase() to have two points
            lambda: prometheus.query("count_over_time(clustermgr_leader[5m]) >= 3"),
            30,
            "Prometheus to scrape the daemon three times",
        )
        empty = [q for q in dashboard_queries() if not prometheus.query(q)]
        assert not empty, f"dashboard queries that return no series: {empty}"

        lab.write_config(interval_s=INTERVAL_S + 1)
        daemon.send_signal(signal.SIGHUP)
        wait_until(lambda: "configuration reloaded" in log_path.read_text(), 20, "reload")
        good = lab.config_path.read_text()
        lab.config_path.write_text(good.replace("[daemon]", "[daemon]\nbogus_key = 1"))
        daemon.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload refused" in log_path.read_text(), 20, "refusal")
        assert "bogus_key: unknown key" in log_path.read_text()
        assert daemon.poll() is None
        lab.config_path.write_text(good)

        lab.sbatch("--wrap", "hostname")  # a cycle starts; SIGTERM lands during it
        time.sleep(0.5)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0
        assert "stopped cleanly" in log_path.read_text()
        states = node_states(lab)
        assert "LAUNCHING" not in states.values(), states  # no half-applied launch
        status = json.loads(lab.clustermgr("status", "--json", check=False).stdout)
        assert status["daemon"] is None and status["instances_launched"] >= 1
    finally:
        if daemon.poll() is None:
            daemon.kill()
        notify.close()

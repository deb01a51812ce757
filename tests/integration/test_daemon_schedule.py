"""cm-scale as a real process: every periodic job fires on its own schedule (and still does
after a reload and after steps of the wall clock), and systemd's watchdog is fed while the
cycle makes progress, not merely while the process lives.

The edges of the world: the AWS SDK talks to the moto fake (tests/fakes/aws_fake.py, in
this process, so a test can slow or hold its answers), Slurm is a set of stand-in clients
in [slurm] bin_dir (sinfo lists the template's powered-down cloud nodes, squeue an empty
queue and, on demand, hangs; scontrol accepts every update), and systemd is a datagram
socket this test reads as $NOTIFY_SOCKET, with $WATCHDOG_USEC set as systemd sets it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest

from clustermgr.runtime.daemon import DIRECTOR_SYNC_POLL_S
from tests.conftest import cannot_run
from tests.fakes.aws_fake import FakeAws
from tests.fakes.aws_harness import ACCESS_KEY, IMAGE, SECRET_KEY, fake_aws_env
from tests.labs import clockshim

BIN = Path(sys.executable).parent
NODES = [f"aws-{i}" for i in range(1, 7)]
STALL_S = 3.0  # [daemon] stall_timeout_s of the watchdog tests
WATCHDOG_USEC = 1_500_000  # WatchdogSec=1.5: a ping every 0.5 s while the work progresses

SINFO = json.dumps(
    {
        "nodes": [
            {
                "name": name,
                "state": ["IDLE", "CLOUD", "POWERED_DOWN"],
                "cpus": 2,
                "real_memory": 1000,
                "partitions": ["gpu"],
                "features": "aws1,aws-a",
            }
            for name in NODES
        ]
    }
)
# squeue hangs while the file `hang` exists (the child's pid in hang.pid, for the test to
# stop it); otherwise the queue is empty
SQUEUE = """#!/bin/sh
if [ -e "{d}/hang" ]; then echo $$ > "{d}/hang.pid"; exec sleep 120; fi
exit 0
"""
SCONTROL = '#!/bin/sh\necho "$*" >> "{d}/scontrol.log"\nexit 0\n'


def standin_slurm(bin_dir: Path) -> None:
    bin_dir.mkdir()
    (bin_dir / "sinfo.json").write_text(SINFO)
    scripts = {
        "sinfo": f'#!/bin/sh\nexec cat "{bin_dir}/sinfo.json"\n',
        "squeue": SQUEUE.format(d=bin_dir),
        "scontrol": SCONTROL.format(d=bin_dir),
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


@dataclass
class Notifications:
    """What cm-scale sent to $NOTIFY_SOCKET, with when it arrived (time.monotonic())."""

    sock: socket.socket
    received: list[tuple[float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Notifications:
        self.sock.settimeout(0.2)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                message = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            except OSError:
                return
            self.received.append((time.monotonic(), message))

    def pings(self, since: float = 0.0) -> list[float]:
        return [
            at for at, message in list(self.received) if "WATCHDOG=1" in message and at >= since
        ]

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@dataclass
class Lab:
    workdir: Path
    fake: FakeAws
    config: Path
    bin_dir: Path
    log: Path
    daemon: subprocess.Popen[bytes] | None = None
    notes: Notifications | None = None

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, **fake_aws_env(), "CLUSTERMGR_CONFIG": str(self.config)}

    def run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / program), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )

    def write_config(self, extra: str = "", **daemon: float) -> None:
        ec2 = boto3.client(
            "ec2",
            region_name=self.fake.region,
            endpoint_url=self.fake.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]][:2]
        options = {"interval_s": 60.0, "metrics_port": 0, "heartbeat_stale_s": 3600, **daemon}
        api_timeout = options.pop("api_timeout_s", 60)
        command_timeout = options.pop("command_timeout_s", 30)
        self.config.write_text(
            f"""
[cluster]
name = "sched"
[database]
url = "sqlite:///{self.workdir / "cm.db"}"
[slurm]
bin_dir = "{self.bin_dir}"
command_timeout_s = {command_timeout}
[[providers]]
name = "aws1"
type = "aws"
region = "{self.fake.region}"
endpoint_url = "{self.fake.url}"
retry_mode = "standard"
api_timeout_s = {api_timeout}
launch_batch_size = 1
[[templates]]
name = "aws-a"
provider = "aws1"
partition = "gpu"
nodes = "aws-[1-6]"
instance_types = ["p4d.24xlarge"]
image = "{IMAGE}"
subnets = {json.dumps(subnets)}
cpus = 2
memory_mb = 1000
demand_mode = "slurm"
[daemon]
state_dir = "{self.workdir / "state"}"
"""
            + "".join(f"{key} = {value}\n" for key, value in options.items())
            + extra
        )

    def start(self, env: dict[str, str] | None = None) -> None:
        notify_path = self.workdir / "notify.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(notify_path))
        self.notes = Notifications(sock).start()
        with self.log.open("wb") as out:
            self.daemon = subprocess.Popen(
                [str(BIN / "cm-scale"), "--skip-slurm-check"],
                env={**self.env, "NOTIFY_SOCKET": str(notify_path), **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_until(lambda: any("READY=1" in m for _, m in self.notes_list()), 60, "READY=1")

    def notes_list(self) -> list[tuple[float, str]]:
        assert self.notes is not None
        return list(self.notes.received)

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def lines(self, containing: str) -> list[str]:
        return [line for line in self.said().splitlines() if containing in line]

    def resume(self, *nodes: str) -> None:
        """Slurm's ResumeProgram, as slurmctld would run it (it pokes the daemon)."""
        done = self.run("clustermgr-slurm-resume", ",".join(nodes))
        assert done.returncode == 0, done.stderr

    def query(self, sql: str) -> list[tuple[object, ...]]:
        with sqlite3.connect(self.workdir / "cm.db", timeout=30) as conn:
            return conn.execute(sql).fetchall()

    def stop(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.kill()
            self.daemon.wait(30)
        if self.notes is not None:
            self.notes.close()


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    fake = FakeAws().start()
    made = Lab(tmp_path, fake, tmp_path / "clustermgr.toml", tmp_path / "slurm", tmp_path / "d.log")
    standin_slurm(made.bin_dir)
    try:
        yield made
    finally:
        made.stop()
        pid_file = made.bin_dir / "hang.pid"
        if pid_file.exists():  # the stand-in squeue's sleep, orphaned by the killed daemon
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        fake.stop()


def prepare(lab: Lab, extra: str = "", **daemon: float) -> None:
    lab.write_config(extra, **daemon)
    for args in (("db", "upgrade"), ("nodes", "sync", "--no-slurm")):
        done = lab.run("clustermgr", *args)
        assert done.returncode == 0, done.stderr


# --- every job on its schedule ----------------------------------------------------------


def jobs_fire(lab: Lab, what: str) -> None:
    """Within a few periods: two more scale cycles and two more reconciles in the log, the
    catalog rows rewritten twice, and the heartbeat row moving while no cycle ended."""
    cycles, reconciles = len(lab.lines("cycle: ")), len(lab.lines("reconcile: "))
    catalog = {lab.query("SELECT max(updated_at) FROM instance_types")[0][0]}
    beats: list[tuple[object, ...]] = []

    def fired() -> bool:
        catalog.add(lab.query("SELECT max(updated_at) FROM instance_types")[0][0])
        beats.extend(lab.query("SELECT heartbeat_at, last_cycle_at FROM daemon_status"))
        beat_between_cycles = any(
            a[1] == b[1] and a[0] != b[0] for a, b in itertools.pairwise(beats)
        )
        return (
            len(lab.lines("cycle: ")) >= cycles + 2
            and len(lab.lines("reconcile: ")) >= reconciles + 2
            and len(catalog - {None}) >= 3
            and beat_between_cycles
        )

    wait_until(fired, 30, f"every periodic job to fire {what}")


def test_every_periodic_job_fires_and_keeps_firing_after_a_reload_and_clock_steps(
    lab: Lab,
) -> None:
    try:
        clock = clockshim.build(lab.workdir)
    except clockshim.ClockShimUnavailable as exc:
        cannot_run(str(exc))
        return
    prepare(lab, interval_s=3, reconcile_interval_s=2, catalog_refresh_s=2)
    lab.start(env=clock.env)
    jobs_fire(lab, "after the start")

    os.kill(lab.daemon.pid, signal.SIGHUP)  # type: ignore[union-attr]
    wait_until(lambda: lab.lines("configuration reloaded"), 20, "the reload")
    jobs_fire(lab, "after a reload")

    clock.step_to(+3600)  # NTP steps the clock forward: every planned run is in the past
    wait_until(lambda: lab.lines("wall clock stepped"), 20, "the forward step noticed")
    jobs_fire(lab, "after the clock stepped forward")
    stepped = len(lab.lines("wall clock stepped"))
    clock.step_to(0)  # and back: every planned run is an hour away
    wait_until(lambda: len(lab.lines("wall clock stepped")) > stepped, 20, "the step back")
    jobs_fire(lab, "after the clock stepped back")
    assert lab.daemon is not None and lab.daemon.poll() is None, lab.said()[-2000:]


def test_reloads_more_frequent_than_a_job_do_not_starve_it(lab: Lab) -> None:
    """A SIGHUP every second re-arms the scheduler; a job with a 4 s period still runs
    (each keeps its planned run: re-arming it a whole period away would push it back for
    ever, as an hourly catalog behind a config-management tool's reloads would be)."""
    prepare(lab, interval_s=3600, reconcile_interval_s=4, catalog_refresh_s=4)
    lab.start()
    wait_until(lambda: lab.lines("cycle: "), 30, "the first cycle")
    assert lab.daemon is not None
    catalog: set[object] = set()
    # 20 s: five periods, so a loaded machine whose catalog write holds SQLite for a few
    # seconds (the reloads' events and the lease wait for it) still shows two runs or more
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        lab.daemon.send_signal(signal.SIGHUP)
        time.sleep(1)
        catalog.add(lab.query("SELECT max(updated_at) FROM instance_types")[0][0])
    # more reloads than 20 s / the 4 s period: each re-arm came before the job's next run
    # was due (a loaded machine handles fewer than the 20 signals sent)
    assert len(lab.lines("configuration reloaded")) >= 4
    assert len(lab.lines("reconcile: ")) >= 2, lab.said()[-3000:]
    assert len(catalog - {None}) >= 2, catalog


DIRECTORS = f"""
[[directors]]
provider = "aws1"
instance_type = "m5.large"
image = "{IMAGE}"
required = false
[images]
sync_interval_s = 1
"""


def test_the_director_sync_job_runs_on_its_own(lab: Lab) -> None:
    """Between scale cycles (an hour apart here) the director-sync job still runs every
    poll period: a serving director that has no address yet is reported each time."""
    prepare(lab, DIRECTORS, interval_s=3600)
    lab.start()
    wait_until(lambda: lab.lines("cycle: "), 30, "the first cycle")
    region = lab.query("SELECT id FROM regions")[0][0]
    with sqlite3.connect(lab.workdir / "cm.db", timeout=30) as conn:
        conn.execute(
            "INSERT INTO directors (name, region_id, state, state_reason, health, created_at, "
            "updated_at) VALUES ('dir-aws1', ?, 'ready', '', '', datetime(), datetime())",
            (region,),
        )
    added = time.monotonic()
    unsynced = "director sync: director dir-aws1: no address yet; not synced"
    wait_until(lambda: len(lab.lines(unsynced)) >= 2, 30, "two runs of the director-sync job")
    assert time.monotonic() - added < 2 * DIRECTOR_SYNC_POLL_S + 5
    assert len(lab.lines("cycle: ")) == 1  # no scale cycle ran meanwhile: the job ran alone


# --- the watchdog: fed while the cycle makes progress -----------------------------------


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_a_long_cycle_that_makes_progress_keeps_the_watchdog_fed(lab: Lab) -> None:
    prepare(lab, stall_timeout_s=STALL_S)
    lab.start(env={"WATCHDOG_USEC": str(WATCHDOG_USEC)})
    wait_until(lambda: lab.lines("cycle: "), 30, "the first cycle")
    lab.fake.slow(1.0)  # every EC2 call answers after a second: six batches, six tags, ...
    began = time.monotonic()
    lab.resume(*NODES)
    wait_until(lambda: lab.lines("cycle: launched 6"), 120, "the six launches")
    ended = time.monotonic()
    [line] = lab.lines("cycle: launched 6")
    duration = float(line.rsplit("(", 1)[1].split(" s)")[0])
    assert duration > 3 * STALL_S, f"the cycle was not long enough to prove anything: {line}"
    assert lab.notes is not None
    pings = lab.notes.pings(since=began)
    assert pings and pings[0] - began < 1.0 and ended - pings[-1] < 1.0, pings
    assert max(gaps(pings)) < 1.5, f"the watchdog went quiet during a busy cycle: {gaps(pings)}"
    assert not lab.lines("stalled"), lab.lines("stalled")
    launched = lab.query("SELECT count(*) FROM nodes WHERE instance_id IS NOT NULL")[0][0]
    assert launched == 6


def hang_in_cloud(lab: Lab) -> tuple[str, Callable[[], None]]:
    gate = lab.fake.hold_next("CreateFleet")  # the request never gets an answer
    lab.resume("aws-1")
    assert gate.reached.wait(60), "the launch never reached the cloud"
    return "EC2 CreateFleet", gate.release


def hang_in_slurm(lab: Lab) -> tuple[str, Callable[[], None]]:
    (lab.bin_dir / "hang").touch()  # the next squeue never returns
    lab.resume("aws-1")  # pokes the daemon: a cycle starts at once
    wait_until(lambda: (lab.bin_dir / "hang.pid").exists(), 60, "squeue to hang")
    return "`squeue", lambda: None


@pytest.mark.parametrize("hang", [hang_in_cloud, hang_in_slurm], ids=["cloud-call", "squeue"])
def test_a_cycle_stuck_in_a_call_stops_the_watchdog_and_says_where(
    lab: Lab, hang: Callable[[Lab], tuple[str, Callable[[], None]]]
) -> None:
    # the calls' own timeouts far above the stall limit: only the watchdog can notice
    prepare(lab, stall_timeout_s=STALL_S, api_timeout_s=600, command_timeout_s=600)
    lab.start(env={"WATCHDOG_USEC": str(WATCHDOG_USEC)})
    wait_until(lambda: lab.lines("cycle: "), 30, "the first cycle")
    assert lab.lines("stall_timeout_s = 3 is not above [slurm] command_timeout_s = 600")
    assert lab.notes is not None
    assert lab.notes.pings(since=time.monotonic() - 2), "no pings before the hang"
    where, release = hang(lab)
    hung_at = time.monotonic()
    try:
        wait_until(lambda: lab.lines("stalled"), STALL_S + 5, "the stall line")
        [line] = lab.lines("stalled")
        assert "scale cycle stalled: no progress for" in line and where in line, line
        assert "watchdog pings stop" in line, line
        time.sleep(3)  # systemd would kill after WatchdogSec (1.5 s) without a ping
        pings = lab.notes.pings(since=hung_at)
        assert pings, "the pings stopped before the stall limit"
        assert pings[-1] - hung_at < STALL_S + 1.0, (pings[-1] - hung_at, line)
        assert time.monotonic() - pings[-1] > 2.5, "pings went on during the stall"
        wait_until(
            lambda: (
                "stalled"
                in json.loads(lab.run("clustermgr", "status", "--json").stdout)["daemon"][
                    "last_cycle"
                ]
            ),
            15,
            "clustermgr status to show the stall",
        )
    finally:
        lab.stop()
        release()

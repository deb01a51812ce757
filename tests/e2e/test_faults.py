"""The fault matrix through the daemon (docs/reliability.md): one cm-scale, running as a
service against the AWS SDK over the moto fake and a real slurmctld with real slurmd behind
every instance (tests/labs/cloudlab.py), meets one fault per test. Each test injects it,
checks the documented reaction and that the daemon is still serving, clears it, and checks
that a job then runs and nothing is left behind.

The tests share one lab and one daemon (a lab takes ~10 s to build), in file order; each
starts from rest: no job, no instance, every burst node powered down and held.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.providers.aws.client import MAX_ATTEMPTS
from clustermgr.providers.local import net
from tests.conftest import cannot_run
from tests.e2e.conftest import _can_burst
from tests.fakes.aws_fake import FakeAws
from tests.fakes.aws_harness import ACCESS_KEY, SECRET_KEY
from tests.labs import clockshim
from tests.labs.cloudlab import CloudLab, LabOptions, cloud_lab, local_id

API_TIMEOUT_S = 2.0
BUSY_TIMEOUT_S = 2.0
TMPFS_BYTES = 16 * 1024 * 1024
BACKOFF_S = 12.0


@dataclass
class FaultLab:
    lab: CloudLab
    daemon: subprocess.Popen[str]
    log: Path
    clock: clockshim.SteppedClock  # the edge of the world: cm-scale's wall clock

    @property
    def fake(self) -> FakeAws:
        fake: FakeAws = self.lab.harness.fake  # type: ignore[attr-defined]
        return fake

    def log_since(self, offset: int) -> str:
        return self.log.read_text(errors="replace")[offset:]

    def log_offset(self) -> int:
        return len(self.log.read_text(errors="replace"))

    def alive(self) -> bool:
        return self.daemon.poll() is None

    def status(self) -> dict[str, object]:
        data: dict[str, object] = json.loads(
            self.lab.clustermgr("status", "--json", check=False).stdout
        )
        return data

    def run_job(self, seconds: int = 1) -> str:
        return self.lab.submit("--wrap", f"sleep {seconds}")

    def wait_done(self, job: str, timeout_s: float = 120) -> None:
        self.lab.wait(
            f"job {job} to complete",
            lambda: self.lab.job(job, "JobState") == "COMPLETED",
            timeout_s,
        )

    def wait_rest(self, timeout_s: float = 90) -> None:
        """No instance left (the idle node's terminated) and every node held again."""
        self.lab.wait("no instance left", lambda: self.lab.instances() == [], timeout_s)
        self.lab.wait("every burst node held", lambda: held(self.lab), 30)

    def wait_faulted(self, what: str, condition: Callable[[], object], timeout_s: float) -> None:
        """lab.wait, while the boot agent's own listings meet the fault too."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            if self.lab.agent is not None:
                self.lab.agent.errors.clear()
            time.sleep(0.5)

    def clear(self) -> None:
        self.fake.clear_faults()
        if self.lab.agent is not None:
            self.lab.agent.errors.clear()  # it lists through the same faults


def held(lab: CloudLab) -> bool:
    assert lab.slurm is not None
    out = lab.slurm.run("sinfo", "-N", "-h", "-o", "%N|%T").stdout
    return all(line.split("|")[1] == "drained~" for line in out.splitlines() if line.strip())


@contextlib.contextmanager
def tmpfs(path: Path, size: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(scope="module")
def faults() -> Iterator[FaultLab]:
    missing = _can_burst()
    if missing:
        cannot_run(f"end-to-end tests cannot run: {missing}")
    workdir = Path(tempfile.mkdtemp(prefix="cm-e2e-faults-", dir="/tmp"))
    workdir.chmod(0o755)
    try:
        clock = clockshim.build(workdir)
    except clockshim.ClockShimUnavailable as exc:
        cannot_run(str(exc))
    try:
        # the state dir and the database on a small file system of their own: the disk-full
        # test fills it
        with tmpfs(workdir / "state", TMPFS_BYTES) as state:
            options = LabOptions(
                provider={"api_timeout_s": API_TIMEOUT_S},
                policy_chain=(
                    {"name": "queue_depth"},
                    {"name": "idle_timeout", "options": {"minutes": 0.05, "margin_s": 0}},
                ),
                daemon={"launch_backoff_s": BACKOFF_S},
                slurm={"command_timeout_s": 5},
                database={
                    "url": f"sqlite:///{state / 'cm.db'}",
                    "busy_timeout_s": BUSY_TIMEOUT_S,
                },
            )
            with (
                cloud_lab(workdir, "aws", options) as lab,
                lab.daemon(extra_env=clock.env) as daemon,
            ):
                made = FaultLab(lab, daemon, workdir / "cm-scale.log", clock)
                lab.wait("the daemon to hold the burst nodes", lambda: held(lab), 30)
                yield made
    finally:
        if not os.environ.get("CM_KEEP_LAB"):
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def lab(faults: FaultLab) -> Iterator[FaultLab]:
    faults.clock.step_to(0)
    faults.clear()
    assert faults.lab.slurm is not None
    faults.lab.slurm.run("scancel", "--user=root", check=False)  # a failed test's jobs
    yield faults
    faults.clear()
    assert faults.alive(), faults.log_since(0)[-3000:]


def test_5xx_on_launch_is_retried_backs_off_and_recovers(lab: FaultLab) -> None:
    lab.wait_rest()  # no idle node: the job needs a launch
    lab.fake.fail_next("InternalError", attempts=10_000, actions=["CreateFleet"], status=500)
    before = lab.fake.calls().get("CreateFleet", 0)
    offset = lab.log_offset()
    job = lab.run_job()
    lab.lab.wait(
        "a launch failure in the log",
        lambda: "(Code:TRANSIENT)" in lab.log_since(offset),
        60,
    )
    time.sleep(BACKOFF_S - 5)  # cycles of 2 s, the cloud answering 500 to every launch
    sent = lab.fake.calls().get("CreateFleet", 0) - before
    # botocore sends the call MAX_ATTEMPTS (5) times, then the template backs off for
    # [daemon] launch_backoff_s: one launch in those cycles, not one a cycle
    assert lab.log_since(offset).count("launching 1 instance(s)") == 1, lab.log_since(offset)
    assert 0 < sent <= 2 * MAX_ATTEMPTS, sent
    status = lab.lab.clustermgr("status", check=False).stdout
    assert "BACKING OFF (Code:BACKOFF) 1 launch(es) in a row failed (TRANSIENT)" in status
    assert (lab.lab.job(job, "JobState"), lab.lab.job(job, "Restarts")) == ("PENDING", "0")
    assert lab.lab.instances() == []
    lab.clear()
    lab.wait_done(job)


def test_api_timeout_acts_on_nothing_and_recovers(lab: FaultLab) -> None:
    offset = lab.log_offset()
    lab.fake.slow(3 * API_TIMEOUT_S, actions=["DescribeInstances", "DescribeFleets"])
    job = lab.run_job()
    lab.wait_faulted(
        "a cycle that says listing the cloud timed out",
        lambda: (
            "listing cloud1 failed" in lab.log_since(offset)
            and "Read timeout" in lab.log_since(offset)
        ),
        60,
    )
    time.sleep(2 * API_TIMEOUT_S)
    # what it cannot see it does not act on: no launch while the listing times out
    assert "launching" not in lab.log_since(offset), lab.log_since(offset)
    assert lab.alive()
    lab.clear()
    lab.wait_done(job)
    assert "Traceback" not in lab.log_since(offset), lab.log_since(offset)[-3000:]


def test_spot_reclaim_of_a_running_node_requeues_its_job_and_replaces_the_node(
    lab: FaultLab,
) -> None:
    offset = lab.log_offset()
    job = lab.run_job(seconds=300)
    lab.lab.wait("the job to run", lambda: lab.lab.job(job, "JobState") == "RUNNING", 120)
    node = lab.lab.job(job, "NodeList")
    [instance] = [i for i in lab.lab.instances() if i["node"] == node]
    # the cloud takes it back: the machine is gone at once (SIGKILL to everything in its
    # namespace, so no slurmstepd reports the job's end), then the instance is terminated
    for pid in net.namespace_pids(local_id(str(instance["instance_id"]))):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ec2 = lab.lab.harness.client()  # type: ignore[attr-defined]
    ec2.terminate_instances(InstanceIds=[str(instance["instance_id"])])
    lab.lab.wait(
        "the node's history to show the instance vanished",
        lambda: any(
            "(Code:VANISHED)" in h["reason"]
            for h in json.loads(lab.lab.clustermgr("nodes", "history", node, "--json").stdout)
        ),
        60,
    )
    lab.lab.wait("the job to be requeued", lambda: lab.lab.job(job, "Restarts") == "1", 60)
    assert lab.lab.slurm is not None
    lab.lab.slurm.run("scancel", job)  # a 300 s job: its second run is not the point
    assert "Traceback" not in lab.log_since(offset), lab.log_since(offset)[-3000:]


def test_slurmctld_down_and_back(lab: FaultLab) -> None:
    assert lab.lab.slurm is not None
    offset = lab.log_offset()
    lab.lab.slurm.stop()
    try:
        lab.lab.wait(
            "a cycle that says Slurm could not be read",
            lambda: "Slurm could not be read, nothing done" in lab.log_since(offset),
            60,
        )
        assert lab.alive()
        assert lab.lab.instances() == []
    finally:
        lab.lab.slurm.start()
    job = lab.run_job()
    lab.wait_done(job)
    assert "Traceback" not in lab.log_since(offset), lab.log_since(offset)[-3000:]


def test_database_locked_is_one_line_and_the_daemon_recovers(lab: FaultLab) -> None:
    offset = lab.log_offset()
    url = lab.lab.db_url.removeprefix("sqlite:///")
    hold_for = 4 * BUSY_TIMEOUT_S + 4

    def hold_lock() -> None:
        conn = sqlite3.connect(url, timeout=30)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            time.sleep(hold_for)
        finally:
            conn.rollback()
            conn.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    job = lab.run_job()
    holder.join()
    log = lab.log_since(offset)
    assert "database is locked" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert lab.alive()
    lab.wait_done(job)
    lab.lab.wait("a good cycle in status", lambda: lab.status()["daemon"] is not None, 30)


def test_disk_full_on_the_state_dir_is_one_line_and_the_daemon_recovers(lab: FaultLab) -> None:
    offset = lab.log_offset()
    state = lab.lab.state_dir
    filler = state / "filler"
    with filler.open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * (1 << 20))
    try:
        job = lab.run_job()
        lab.lab.wait(
            "a cycle that says the disk is full",
            lambda: (
                "disk is full" in lab.log_since(offset) or "No space left" in lab.log_since(offset)
            ),
            60,
        )
        assert lab.alive()
    finally:
        filler.unlink()
    lab.wait_done(job)
    assert "Traceback" not in lab.log_since(offset), lab.log_since(offset)[-3000:]


def test_credentials_revoked_mid_run_is_one_line_naming_the_source_and_recovers(
    lab: FaultLab,
) -> None:
    lab.wait_rest()  # no idle node: the job needs a launch
    offset = lab.log_offset()
    lab.fake.reject_access_key(ACCESS_KEY)  # the key the daemon runs with, revoked
    job = lab.run_job()
    lab.wait_faulted(
        "a cycle that says the credentials were rejected",
        lambda: "AUTH" in lab.log_since(offset),
        60,
    )
    log = lab.log_since(offset)
    assert "Traceback" not in log and SECRET_KEY not in log, log[-3000:]
    assert lab.alive()
    assert (lab.lab.job(job, "JobState"), lab.lab.job(job, "Restarts")) == ("PENDING", "0")
    lab.clear()  # the key is valid again
    lab.wait_done(job)


def node_states(lab: FaultLab) -> dict[str, str]:
    rows = json.loads(lab.lab.clustermgr("nodes", "list", "--json").stdout)
    return {r["name"]: r["state"] for r in rows}


@pytest.mark.flaky(reruns=1, only_rerun=["Unable to contact slurm controller"])  # as test_clouds
def test_a_clock_step_either_way_is_not_time_passed_and_never_stalls_the_daemon(
    lab: FaultLab,
) -> None:
    """Forward two hours (more than the boot timeout) while a node boots: it is not timed
    out. Back two hours while its job runs: cycles go on (APScheduler plans by the wall
    clock) and the idle node is stopped as usual."""
    assert lab.lab.agent is not None
    lab.wait_rest()
    offset = lab.log_offset()
    lab.lab.agent.paused = True  # a machine slow to boot
    try:
        job = lab.run_job(seconds=8)
        lab.lab.wait("a node booting", lambda: "BOOTING" in node_states(lab).values(), 60)
        stepped = lab.log_offset()
        lab.clock.step_to(+7200)
        lab.lab.wait(
            "two cycles after the step", lambda: lab.log_since(stepped).count("cycle: ") >= 3, 30
        )
        assert "BOOTING" in node_states(lab).values(), lab.log_since(offset)[-3000:]
        assert "the wall clock stepped forward by 7200 s" in lab.log_since(offset)
    finally:
        lab.lab.agent.paused = False
    lab.lab.wait("the job to run", lambda: lab.lab.job(job, "JobState") == "RUNNING", 120)
    lab.clock.step_to(0)
    lab.lab.wait(
        "the daemon to see the step back",
        lambda: "the wall clock stepped back by 7200 s" in lab.log_since(offset),
        30,
    )
    lab.wait_done(job)
    lab.wait_rest()  # cycles went on: the idle node was stopped
    log = lab.log_since(offset)
    assert "BOOT_TIMEOUT" not in log and "Traceback" not in log, log[-3000:]
    assert lab.lab.job(job, "Restarts") == "0"

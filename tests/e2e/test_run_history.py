"""onprem_first's start estimates from the site's own run-time history, as an admin sees
them: a real slurmctld, the AWS SDK against its fake with a real slurmd behind the one
burst node, cm-scale running. Three jobs of one shape run a quarter of their 1-minute
limit; cm-scale sees each run and end and keeps it (`job_runs`). Then a job of that shape
with a 30-minute limit runs, and the next waits for it: Slurm expects it in 30 minutes (the
limit), the history in about 8, so `policy dry-run` (a process of its own, reading the
history from the database) holds it and says which estimate, from how many past jobs."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.labs.cloudlab import BIN, CloudLab, LabOptions, cloud_lab

pytestmark = pytest.mark.e2e

OPTIONS = LabOptions(
    nodes="burst-1",
    policy_chain=(
        {"name": "onprem_first", "options": {"minutes": 15}},
        {"name": "queue_depth"},
        {"name": "idle_timeout", "options": {"minutes": 10}},  # one node for every job
    ),
    slurm_conf=("SchedulerParameters=bf_interval=2",),  # start estimates within seconds
)


@pytest.fixture
def lab(lab_dir: Path) -> Iterator[CloudLab]:
    with cloud_lab(lab_dir, "aws", OPTIONS) as made:
        yield made


def job_runs(lab: CloudLab) -> int:
    path = lab.db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM job_runs").fetchone()[0])


def node_state(lab: CloudLab, node: str) -> str:
    assert lab.slurm is not None
    return lab.slurm.run("sinfo", "-h", "-n", node, "-o", "%T", check=False).stdout.strip()


def state(lab: CloudLab, job_id: str) -> str:
    return lab.job(job_id, "JobState")


def test_dry_run_holds_a_job_the_history_says_starts_soon(lab: CloudLab) -> None:
    assert lab.slurm is not None
    with lab.daemon():
        # the first cycle holds the burst node first: a job Slurm placed on it before would
        # be requeued when it is held, and wait out Slurm's 2-minute requeue BeginTime
        lab.wait("the burst node held", lambda: "drain" in node_state(lab, "burst-1"), 60)
        for done in range(1, 4):  # one after another on the one node: each seen to end
            short = lab.submit("--exclusive", "-t", "1", "--wrap", "sleep 15")
            lab.wait(f"job {short} to finish", lambda j=short: state(lab, j) == "COMPLETED", 240)
            lab.wait(f"{done} runs kept", lambda n=done: job_runs(lab) >= n, 30)
        long = lab.submit("--exclusive", "-t", "30", "--wrap", "sleep 600")
        lab.wait(f"job {long} to run", lambda: state(lab, long) == "RUNNING", 120)
        waiting = lab.submit("--exclusive", "-t", "30", "--wrap", "true")
        lab.wait(
            "Slurm's start estimate for the waiting job",
            lambda: lab.job(waiting, "StartTime") not in ("", "Unknown"),
            60,
        )
        done = subprocess.run(
            [str(BIN / "clustermgr"), "policy", "dry-run", "--json"],
            capture_output=True,
            text=True,
            env={**lab.env, "COLUMNS": "400"},
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    fate = {job: (r["action"], r["reason"]) for r in rows if "jobs" in r for job in r["jobs"]}
    action, reason = fate[waiting]
    assert action == "held", (rows, lab.tail())
    assert reason.startswith("onprem_first: expected to start by "), reason
    assert "as Slurm's time limits say: the running job it waits for" in reason
    assert f"(the last, job {long}, by the p90 of its user's last 3 runs of its shape)" in reason
    assert not [r for r in rows if r["action"] == "launch"], rows  # nothing bought for it

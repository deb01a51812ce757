"""cmsub end to end, for the lead to run (a real slurmctld and local burst nodes): a test
user stages a tree in, the job reads it on a burst node and writes results, and the
results come back after stage-out with every checksum verified; a file the user cannot read
is refused at submit time; a stage-in that fails mid-way leaves the job never run, with the
reason in `cmsub --status`, and submitting again resumes the transfer in the same area.

The lab has no separate data-mover nodes: the transfer jobs run on the cloud partition
(burst nodes share the head's filesystem here, as a data mover mounts it, and reach
cm-scale's staging socket through it). The staging area is a local directory that the
burst nodes see at the same path (`node_root`); staging through the region's director
(its per-user rsync module) is tests/e2e/test_cmsub_director.py, the s3 transport
tests/integration/test_staging_s3.py. The user has no access to the database.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.db.database import Database
from clustermgr.staging.service import StagingService
from tests.e2e.conftest import slurm_user_for_hooks
from tests.labs.burstlab import BurstLab, BurstLabSpec

TEST_USER = "cmsubtest"
BIN = Path(sys.executable).parent


@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path


@pytest.fixture
def test_user(lab_dir: Path) -> Iterator[User]:
    yield from unprivileged_user(lab_dir)


def unprivileged_user(lab_dir: Path) -> Iterator[User]:
    """An unprivileged user (created with useradd when missing, removed afterwards)."""
    created = False
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", TEST_USER], check=True)
        created = True
    entry = pwd.getpwnam(TEST_USER)
    home = lab_dir / "home"
    home.mkdir()
    os.chown(home, entry.pw_uid, entry.pw_gid)
    try:
        yield User(TEST_USER, entry.pw_uid, entry.pw_gid, home)
    finally:
        if created:
            subprocess.run(["userdel", TEST_USER], check=False)


@pytest.fixture
def lab(lab_dir: Path, test_user: User) -> Iterator[BurstLab]:
    shared = lab_dir / "shared"  # the staging root: the service makes the user's area in it
    shared.mkdir(mode=0o755)
    staging = shared / "staging"
    staging.mkdir(mode=0o755)
    run_dir = lab_dir / "run"  # cm-scale's staging socket (the user's only way in)
    run_dir.mkdir(mode=0o755)
    state = lab_dir / "db"
    state.mkdir(mode=0o700)  # the database: root's alone
    spec = BurstLabSpec(
        demand_mode="slurm",
        slurm_user=slurm_user_for_hooks(),
        db_url=f"sqlite:///{state / 'clustermgr.db'}",
        extra_toml=f"""
[staging]
data_mover_partition = "cloud"
quota_bytes = 100000000
transfer_command = "{BIN / "cmsub-transfer"}"
socket = "{run_dir / "cmsub.sock"}"

[[staging.regions]]
provider = "local"
partition = "cloud"
rsync_target = "{staging}"
node_root = "{staging}"
""",
    )
    burst = BurstLab(lab_dir, spec)
    try:
        burst.start()
        (state / "clustermgr.db").chmod(0o600)
        with staging_service(burst):
            yield burst
    finally:
        burst.stop()


@contextlib.contextmanager
def staging_service(burst: BurstLab) -> Iterator[None]:
    """cm-scale's staging service, as a running daemon has it (the lab runs cycles with
    `cm-scale --once`, which exits: the thread runs here for the test's length)."""
    database = Database(burst.db_url)
    service = StagingService(load_settings(burst.config_path), database)
    try:
        service.start()
        yield
    finally:
        service.stop()
        database.dispose()


def as_user(
    lab: BurstLab, user: User, *argv: str, check: bool = False
) -> subprocess.CompletedProcess[str]:
    group = grp.getgrgid(user.gid).gr_name
    full = ["setpriv", f"--reuid={user.name}", f"--regid={group}", "--init-groups", *argv]
    done = subprocess.run(
        full, cwd=user.home, env=lab.env, capture_output=True, text=True, timeout=120, check=False
    )
    assert not check or done.returncode == 0, done.stderr
    return done


def make_tree(user: User) -> dict[str, str]:
    tree = user.home / "input tree"
    (tree / "sub dir").mkdir(parents=True)
    sums = {}
    for rel in ("a.dat", "sub dir/b c.dat", "sub dir/$(x);.dat"):
        data = os.urandom(50_000)
        (tree / rel).write_bytes(data)
        sums[rel] = hashlib.sha256(data).hexdigest()
    for path in [tree, *tree.rglob("*")]:
        os.chown(path, user.uid, user.gid)
    return sums


JOB = """#!/bin/bash
#CMSUB --stage-in 'input tree:input'
#CMSUB --stage-out results:results
mkdir -p "$CMSUB_STAGE_DIR/results"
cd "$CMSUB_STAGE_DIR/input"
sha256sum a.dat 'sub dir/b c.dat' > "$CMSUB_STAGE_DIR/results/sums.txt"
echo "$SLURMD_NODENAME" > "$CMSUB_STAGE_DIR/results/host.txt"
"""


def write_job(user: User) -> None:
    script = user.home / "job.sh"
    script.write_text(JOB)
    os.chown(script, user.uid, user.gid)


def status(lab: BurstLab, user: User, job: str) -> list[dict[str, object]]:
    done = as_user(lab, user, str(BIN / "cmsub"), "--status", job, "--json", check=True)
    rows: list[dict[str, object]] = json.loads(done.stdout)["transfers"]
    return rows


def finished(lab: BurstLab, jobs: list[str]) -> bool:
    ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", ""}
    return all(lab.job_field(job, "JobState") in ended for job in jobs)


def test_a_tree_goes_in_is_read_on_a_burst_node_and_results_come_back(
    lab: BurstLab, test_user: User
) -> None:
    sums = make_tree(test_user)
    write_job(test_user)
    done = as_user(lab, test_user, str(BIN / "cmsub"), "--json", "job.sh", check=True)
    chain = json.loads(done.stdout)
    ids = [chain["stage_in_job"], chain["job"], chain["stage_out_job"]]
    assert lab.job_field(chain["job"], "UserId").startswith(TEST_USER)
    assert "afterok" in lab.job_field(chain["job"], "Dependency") or lab.job_field(
        chain["job"], "JobState"
    ) in ("RUNNING", "COMPLETED", "CONFIGURING")
    lab.run_until(lambda: finished(lab, ids), timeout_s=400)
    assert [lab.job_field(j, "JobState") for j in ids] == ["COMPLETED"] * 3
    results = test_user.home / "results" / chain["job"]  # DEST/<jobid>/
    lines = (results / "sums.txt").read_text().splitlines()
    assert lines == [f"{sums['a.dat']}  a.dat", f"{sums['sub dir/b c.dat']}  sub dir/b c.dat"]
    assert (results / "host.txt").read_text().strip().startswith("cloud")  # a burst node
    assert (results / "sums.txt").stat().st_uid == test_user.uid
    rows = status(lab, test_user, chain["job"])
    assert [(r["direction"], r["state"]) for r in rows] == [("in", "done"), ("out", "done")]
    assert rows[0]["files_verified"] == rows[0]["files_total"] == 3
    assert rows[1]["files_verified"] == rows[1]["files_total"] == 2
    assert not Path(str(chain["stage_dir"])).exists()  # cleaned after the stage-out


def test_a_file_the_user_cannot_read_is_refused_at_submit_time(
    lab: BurstLab, test_user: User
) -> None:
    secret = lab.workdir / "root-only.dat"
    secret.write_text("no")
    secret.chmod(0o600)
    make_tree(test_user)  # the job's own #CMSUB stage-in is fine
    write_job(test_user)
    done = as_user(lab, test_user, str(BIN / "cmsub"), "--stage-in", str(secret), "job.sh")
    assert done.returncode == 2
    assert "you cannot read" in done.stderr and done.stderr.count("\n") == 1
    assert lab.slurm("squeue", "-h", "-u", TEST_USER, "-o", "%i").strip() == ""


def test_a_stage_in_failing_midway_leaves_the_job_never_run(lab: BurstLab, test_user: User) -> None:
    make_tree(test_user)
    write_job(test_user)
    done = as_user(lab, test_user, str(BIN / "cmsub"), "--json", "job.sh", check=True)
    chain = json.loads(done.stdout)
    # after the checks, before the transfer job runs (its burst node is still booting):
    # one file deep in the tree becomes unreadable, so rsync fails part-way
    broken = test_user.home / "input tree" / "sub dir" / "b c.dat"
    broken.chmod(0)
    ids = [chain["stage_in_job"], chain["job"], chain["stage_out_job"]]
    lab.run_until(lambda: finished(lab, ids), timeout_s=400)
    assert lab.job_field(chain["stage_in_job"], "JobState") == "FAILED"
    assert lab.job_field(chain["job"], "JobState") in ("CANCELLED", "")
    assert not (test_user.home / f"slurm-{chain['job']}.out").exists()  # it never ran
    rows = status(lab, test_user, chain["job"])
    assert rows[0]["state"] == "failed" and "exited 23" in str(rows[0]["error"])
    assert rows[1]["state"] == "cancelled"
    assert str(rows[1]["error"]).startswith("stage-in failed:")
    assert not (test_user.home / "results").exists()

    broken.chmod(0o644)
    again = as_user(lab, test_user, str(BIN / "cmsub"), "--json", "job.sh", check=True)
    failed_job = chain["job"]
    chain = json.loads(again.stdout)
    assert chain["resumes"] == failed_job  # the same area: the transfer resumes
    ids = [chain["stage_in_job"], chain["job"], chain["stage_out_job"]]
    lab.run_until(lambda: finished(lab, ids), timeout_s=400)
    assert [lab.job_field(j, "JobState") for j in ids] == ["COMPLETED"] * 3
    assert (test_user.home / "results" / chain["job"] / "sums.txt").is_file()
    rows = status(lab, test_user, chain["job"])
    assert rows[0]["files_done"] < rows[0]["files_total"]  # what arrived was not sent again

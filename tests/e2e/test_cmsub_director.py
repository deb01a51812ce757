"""cmsub end to end through the region's director (issue 20): a real slurmctld, a local
provider whose lab director (slapd + `rsync --daemon` in its namespace, launched by
cm-scale) serves the per-user staging module, and burst nodes that see the director's
staging root at `node_root` (the lab shares one filesystem).

An ordinary user with no access to the database submits a chain with cmsub. The stage-in
first runs on an always-up data mover (the head; its Slurm job held meanwhile): with no
director yet it waits, `waiting for director …` in `cmsub --status`, and cm-scale brings
the director up for that demand alone (no burst node is launched), then it runs. Released,
the Slurm chain runs on a burst node: the stage-in job resumes (nothing sent again) and
sends the tree to `rsync://USER@<director>:873/
clustermgr-staging/<stage_id>` with the password the staging service handed it; the job
reads the staged tree on a burst node; the stage-out brings the results back; every file's
sha256 is compared. The staging service runs as cm-scale's thread would (the lab drives
cycles with `cm-scale --once`). Run it as root on a machine with Slurm, slapd and rsync:

    flock /tmp/cm-lab.lock .venv/bin/pytest -p no:cacheprovider tests/e2e/test_cmsub_director.py
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.db.database import Database
from clustermgr.providers.local import net
from clustermgr.staging import rsyncd_auth
from clustermgr.staging.director import staging_demand
from tests.conftest import cannot_run
from tests.e2e.test_cmsub import (
    BIN,
    TEST_USER,
    User,
    as_user,
    finished,
    make_tree,
    staging_service,
    status,
    unprivileged_user,
)
from tests.labs.burstlab import BurstLab, BurstLabSpec
from tests.labs.directorlab import director_tables, make_head, unavailable
from tests.services.slapd import SlapdUnavailable

SUBNET = "10.213.25.0/24"
JOB = """#!/bin/bash
#CMSUB --stage-in 'input tree:input'
#CMSUB --stage-out results:results
set -e
mkdir -p "$CMSUB_STAGE_DIR/results"
cp -r "$CMSUB_STAGE_DIR/input" "$CMSUB_STAGE_DIR/results/copy"
echo "$SLURMD_NODENAME" > "$CMSUB_STAGE_DIR/results/host.txt"
"""


@pytest.fixture
def lab(lab_dir: Path, test_user: User) -> Iterator[tuple[BurstLab, Path]]:
    why = unavailable()
    if why:
        cannot_run(f"the cmsub director test cannot run: {why}")
    head = make_head(lab_dir / "head", net.Subnet.parse(SUBNET).host_address)
    tables = director_tables(lab_dir, head, base_image="local.gpu2", boot_timeout_s=60)
    staging_root = lab_dir / "director-staging"  # the director's, as burst nodes see it
    staging_root.mkdir(mode=0o755)
    etc = lab_dir / "etc"
    etc.mkdir(mode=0o755)
    run_dir = lab_dir / "run"
    run_dir.mkdir(mode=0o755)
    state = lab_dir / "db"
    state.mkdir(mode=0o700)  # the database: root's alone
    spec = BurstLabSpec(
        subnet=SUBNET,  # policy mode: cm-scale launches the director, then the burst node
        db_url=f"sqlite:///{state / 'clustermgr.db'}",
        extra_toml=tables
        + f"""
[staging]
data_mover_partition = "cloud"
quota_bytes = 100000000
transfer_command = "{BIN / "cmsub-transfer"}"
socket = "{run_dir / "cmsub.sock"}"
director_poll_s = 2

[[staging.regions]]
provider = "local"
partition = "cloud"
rsync_target = "rsync://{{director}}:873/clustermgr-staging"
node_root = "{staging_root}"
rsyncd_secrets = "{etc / "rsyncd.secrets"}"
""",
    )
    burst = BurstLab(lab_dir, spec)
    try:
        burst.start()  # makes the bridge the head's slapd listens on
        try:
            head.start()
        except SlapdUnavailable as exc:
            cannot_run(str(exc))
        (state / "clustermgr.db").chmod(0o600)
        with staging_service(burst):
            yield burst, staging_root
    finally:
        burst.stop()
        head.destroy()


@pytest.fixture
def test_user(lab_dir: Path) -> Iterator[User]:
    yield from unprivileged_user(lab_dir)


def start_as_user(burst: BurstLab, user: User, *argv: str) -> subprocess.Popen[str]:
    group = grp.getgrgid(user.gid).gr_name
    full = ["setpriv", f"--reuid={user.name}", f"--regid={group}", "--init-groups", *argv]
    return subprocess.Popen(
        full,
        cwd=user.home,
        env=burst.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(done: Callable[[], bool], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.5)
    return False


def sha256_tree(tree: Path) -> dict[str, str]:
    return {
        str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in tree.rglob("*")
        if p.is_file()
    }


def test_a_tree_goes_in_and_back_through_the_lab_director(
    lab: tuple[BurstLab, Path], test_user: User
) -> None:
    burst, staging_root = lab
    sums = make_tree(test_user)
    script = test_user.home / "job.sh"
    script.write_text(JOB)
    os.chown(script, test_user.uid, test_user.gid)
    db_file = burst.db_url.removeprefix("sqlite:///")
    probe = f"import sqlite3; sqlite3.connect({db_file!r}).execute('select 1')"
    opened = as_user(burst, test_user, sys.executable, "-c", probe)
    assert opened.returncode != 0  # no access to the database at all
    done = as_user(burst, test_user, str(BIN / "cmsub"), "--json", "job.sh", check=True)
    chain = json.loads(done.stdout)
    stage_id = chain["stage_id"]
    assert chain["stage_dir"] == str(staging_root / TEST_USER / stage_id)
    home = staging_root / TEST_USER
    assert (home.stat().st_uid, stat.S_IMODE(home.stat().st_mode)) == (test_user.uid, 0o700)
    ids = [chain["stage_in_job"], chain["job"], chain["stage_out_job"]]

    # a data mover that is always up (here: the head) runs the stage-in before any cycle
    # (its Slurm job held meanwhile, so no burst job asks for the region): no director yet,
    # so the transfer waits, visibly, and its region is the director lifecycle's demand
    burst.slurm("scontrol", "hold", chain["stage_in_job"])
    stage_in = f"--transfer={status(burst, test_user, chain['job'])[0]['id']}"
    mover = start_as_user(burst, test_user, str(BIN / "cmsub-transfer"), stage_in)
    try:
        waiting = wait_for(lambda: status(burst, test_user, chain["job"])[0]["state"] == "waiting")
        assert waiting, status(burst, test_user, chain["job"])
        row = status(burst, test_user, chain["job"])[0]
        assert str(row["error"]).startswith("waiting for director director-local-here")
        settings = load_settings(burst.config_path)
        database = Database(burst.db_url)
        try:
            assert staging_demand(settings, database) == {"local"}  # the lifecycle's demand
        finally:
            database.dispose()
        burst.run_until(lambda: mover.poll() is not None, timeout_s=200, pause_s=2)
        out, err = mover.communicate(timeout=30)
    finally:
        if mover.poll() is None:
            mover.kill()
            mover.communicate()
    assert mover.returncode == 0, err
    assert "waiting for director director-local-here" in out and "all verified" in out
    burst_nodes = [i for i in burst.instances() if i["template"] == "local-gpu"]
    assert burst_nodes == []  # the director came up for the waiting transfer alone
    burst.slurm("scontrol", "release", chain["stage_in_job"])

    burst.run_until(lambda: finished(burst, ids), timeout_s=400, pause_s=2)
    assert [burst.job_field(j, "JobState") for j in ids] == ["COMPLETED"] * 3, burst.diagnosis()
    [director] = json.loads(burst.clustermgr("directors", "list", "--json").stdout)
    assert director["state"] == "ready"
    results = test_user.home / "results" / chain["job"]  # DEST/<jobid>/
    assert sha256_tree(results / "copy") == sums  # every file, every byte, back
    assert (results / "host.txt").read_text().startswith("cloud")  # read on a burst node
    assert all(p.stat().st_uid == test_user.uid for p in results.rglob("*"))
    rows = status(burst, test_user, chain["job"])
    assert [(r["direction"], r["state"]) for r in rows] == [("in", "done"), ("out", "done")]
    assert rows[0]["files_done"] == 0  # the Slurm stage-in found it all there: nothing resent
    assert f"rsync://{TEST_USER}@{{director}}:873/clustermgr-staging/{stage_id}" in {
        r["stage_dir"] for r in rows
    }
    assert rows[0]["files_verified"] == rows[0]["files_total"] == 3
    assert rows[1]["files_verified"] == rows[1]["files_total"] == 4
    assert not any((home / stage_id).iterdir())  # emptied after the verified stage-out
    # the password went to the director's secrets file and the job, nowhere else
    secrets = Path(str(load_settings(burst.config_path).staging.regions[0].rsyncd_secrets))
    settings = load_settings(burst.config_path)
    key = rsyncd_auth.staging_key(Path(settings.slurm.munge_key_path))
    secret = rsyncd_auth.password(key, TEST_USER)
    assert secrets.read_text() == f"{TEST_USER}:{secret}\n"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    outputs = list(test_user.home.glob("slurm-*.out"))
    assert outputs and all(secret not in p.read_text() for p in outputs)

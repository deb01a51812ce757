"""A burst node reports the image revision it booted and its kernel; once its region's
director serves a newer revision, the node is drained with `(Code:IMAGE)`, its running job
finishes, it is powered down, and new work runs on a node of the new revision (issue 23).

The template names the image definition `base` (tests/labs/directorlab.py) whose user-data
is the shipped cloud-config (images/gpu-node.cloud-init.tmpl), which the local provider
carries out in the node's own mount namespace (node.env at /etc/clustermgr/node.env, the
boot script starting slurmd). The node's HealthCheckProgram (`clustermgr-health-check`,
run by slurmd as root) reports to Slurm; cm-scale reads it from `sinfo --json`. Slurm mode,
driven by repeated `cm-scale --once`, with the lab director (slapd, rsync). Run it alone,
as root, under the lab lock (it starts slurmctld):

    flock /tmp/cm-lab.lock .venv/bin/pytest -p no:xdist tests/e2e/test_image_revisions.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clustermgr.directors.states import director_name
from clustermgr.imaging.definitions import default_images_dir
from clustermgr.providers.local import net
from tests.conftest import cannot_run
from tests.e2e.conftest import slurm_user_for_hooks
from tests.labs.burstlab import BurstLab, BurstLabSpec
from tests.labs.directorlab import director_tables, make_head, unavailable
from tests.services.slapd import SlapdUnavailable

SUBNET = "10.213.27.0/24"
DIRECTOR = director_name("local", "here")


@pytest.fixture
def lab(lab_dir: Path) -> Iterator[BurstLab]:
    why = unavailable()
    if why:
        cannot_run(f"image revision end-to-end test cannot run: {why}")
    head_address = net.Subnet.parse(SUBNET).host_address
    head = make_head(lab_dir / "head", head_address)
    tables = director_tables(lab_dir, head, base_image="local.cpu", boot_timeout_s=60)
    # the image's user-data: the shipped cloud-config (node.env and the boot script)
    shutil.copy(default_images_dir() / "gpu-node.cloud-init.tmpl", lab_dir / "images/base.tmpl")
    check = Path(sys.executable).with_name("clustermgr-health-check")
    wrapper = lab_dir / "health-check"
    wrapper.write_text(
        f"#!/bin/sh\nSLURM_CONF='{lab_dir / 'slurm' / 'slurm.conf'}' exec '{check}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    spec = BurstLabSpec(
        subnet=SUBNET,
        demand_mode="slurm",
        slurm_user=slurm_user_for_hooks(),
        gpus=0,
        instance_type="local.cpu",
        image="base",
        health_check=str(wrapper),
        extra_toml=tables,
    )
    burst = BurstLab(lab_dir, spec)
    try:
        burst.start()
        try:
            head.start()
        except SlapdUnavailable as exc:
            cannot_run(str(exc))
        yield burst
    finally:
        burst.stop()
        head.destroy()


def nodes(lab: BurstLab) -> dict[str, dict[str, Any]]:
    rows = json.loads(lab.clustermgr("nodes", "list", "--json").stdout)
    return {row["name"]: row for row in rows}


def running_on_revision(lab: BurstLab, job: str, revision: str | None) -> bool:
    """The job runs on a node that reported `revision` (None: any revision)."""
    if lab.job_field(job, "JobState") != "RUNNING":
        return False
    reported = nodes(lab)[lab.job_field(job, "NodeList")]["image_revision"]
    return bool(reported) if revision is None else reported == revision


def eligible_now(lab: BurstLab, job: str) -> bool:
    """True. A job Slurm requeued (the director gate powered its first node down: the
    director was not READY yet) waits out Slurm's requeue delay (BeginTime, 2 minutes);
    as an admin would, the test makes it eligible at once: the delay is Slurm's, not ours."""
    if lab.job_field(job, "Reason") == "BeginTime":
        lab.slurm("scontrol", "update", f"JobId={job}", "StartTime=now")
    return True


def newest_revision(lab: BurstLab) -> str:
    [image] = json.loads(lab.clustermgr("images", "status", "--json").stdout)
    assert (image["director"], image["state"]) == (DIRECTOR, "verified"), image
    return str(image["latest"])


def slurm_reason(lab: BurstLab, node: str) -> str:
    return lab.slurm("sinfo", "-h", "-N", "-n", node, "-o", "%E").strip()


def test_a_node_on_an_old_revision_finishes_its_job_and_is_replaced_by_one_on_the_new(
    lab: BurstLab,
) -> None:
    flag = lab.workdir / "let-the-first-job-end"
    first = lab.sbatch(
        "--wrap", f"cat /etc/clustermgr/node.env; while [ ! -e '{flag}' ]; do sleep 1; done"
    )

    lab.run_until(lambda: eligible_now(lab, first) and running_on_revision(lab, first, None), 300)
    old_node = lab.job_field(first, "NodeList")
    # requeued once already when the director gate powered its first node down: not ours
    restarts = lab.job_field(first, "Restarts")
    r1 = newest_revision(lab)
    row = nodes(lab)[old_node]
    assert (row["image_revision"], row["kernel"]) == (r1, os.uname().release), row
    assert f"CLUSTERMGR_IMAGE_REVISION={r1}" in lab.job_output(first)
    status = lab.clustermgr("status", check=False).stdout
    assert f"local-gpu: 1 on image revision {r1}, kernel {os.uname().release}" in status

    # a new revision of the tree, synced to the director and verified there
    (lab.workdir / "tree" / "etc" / "motd").write_text("revision two\n")
    lab.clustermgr("images", "sync")
    r2 = newest_revision(lab)
    assert r2 != r1

    lab.cm_scale_once(check=True)
    reason = f"(Code:IMAGE) runs revision {r1} of base, director {DIRECTOR} serves {r2}"
    assert slurm_reason(lab, old_node) == reason, lab.diagnosis()
    assert nodes(lab)[old_node]["state"] == "DRAINING"
    assert lab.job_field(first, "JobState") == "RUNNING"  # its job goes on

    # the second job holds its node until the node's report is read (an idle node of a
    # slurm-mode template is powered down after SuspendTime, and its report goes with it)
    flag2 = lab.workdir / "let-the-second-job-end"
    second = lab.sbatch(
        "--wrap", f"cat /etc/clustermgr/node.env; while [ ! -e '{flag2}' ]; do sleep 1; done"
    )

    lab.run_until(lambda: running_on_revision(lab, second, r2), timeout_s=300)
    new_node = lab.job_field(second, "NodeList")
    assert new_node != old_node
    assert nodes(lab)[new_node]["state"] == "UP"
    assert f"CLUSTERMGR_IMAGE_REVISION={r2}" in lab.job_output(second)
    assert lab.job_field(first, "JobState") == "RUNNING"
    assert nodes(lab)[old_node]["state"] == "DRAINING"

    flag.touch()
    flag2.touch()

    def old_node_gone() -> bool:
        return nodes(lab)[old_node]["state"] == "POWERED_DOWN" and old_node not in {
            i["node"] for i in lab.instances()
        }

    lab.run_until(old_node_gone, timeout_s=180, pause_s=3)
    assert lab.job_field(first, "JobState") == "COMPLETED"
    assert lab.job_field(first, "Restarts") == restarts  # finished where it ran
    # the slot serves again: powered down, our drain lifted
    lab.run_until(lambda: lab.node_states()[old_node] == "idle~", timeout_s=60, pause_s=3)
    assert lab.job_field(second, "JobState") == "COMPLETED"
    history = json.loads(lab.clustermgr("events", "--since", "1h", "--json").stdout)
    moves = [(e["node"], e["old_state"], e["new_state"], e["reason"]) for e in history]
    assert (old_node, "UP", "DRAINING", reason) in moves
    assert (old_node, "DRAINING", "STOPPING", reason) in moves

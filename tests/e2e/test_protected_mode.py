"""Protected mode against a real slurmctld and the AWS SDK over moto: a template whose
launches or boots keep failing stops launching after `protect_after_failures` failures in
a row, its demand is refused with `(Code:PROTECTED)` (status, `templates list`, the dry
run and the Slurm node reason say so), and `clustermgr templates reset` lets it launch
again."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_aws_burst import AwsLab, make_lab, slurm_reason

LIMIT = 2


def protect(lab: AwsLab) -> AwsLab:
    with lab.config.open("a") as config:  # [daemon] is the file's last table
        config.write(f"protect_after_failures = {LIMIT}\nprotect_backoff_s = 3600\n")
    return lab


@pytest.fixture
def broken_image_lab(lab_dir: Path) -> Iterator[AwsLab]:
    for lab in make_lab(lab_dir, "policy", boot_timeout_s=4):
        yield protect(lab)


@pytest.fixture
def broken_image_batch_lab(lab_dir: Path) -> Iterator[AwsLab]:
    """aws-a launches two nodes at a time (max_nodes) of its four slots."""
    for lab in make_lab(lab_dir, "policy", boot_timeout_s=4, extra="max_nodes = 2"):
        yield protect(lab)


@pytest.fixture
def broken_image_slurm_lab(lab_dir: Path) -> Iterator[AwsLab]:
    for lab in make_lab(lab_dir, "slurm", boot_timeout_s=4):
        yield protect(lab)


@pytest.fixture
def quota_lab(lab_dir: Path) -> Iterator[AwsLab]:
    for lab in make_lab(lab_dir, "policy"):
        yield protect(lab)


def launched(lab: AwsLab) -> int:
    return int(json.loads(lab.run("clustermgr", "status", "--json").stdout)["instances_launched"])


def protected(lab: AwsLab) -> set[str]:
    rows = json.loads(lab.run("clustermgr", "templates", "list", "--json").stdout)
    return {row["name"] for row in rows if row["protected"]}


def test_instances_that_never_register_protect_the_template_after_one_batch(
    broken_image_lab: AwsLab,
) -> None:
    lab = broken_image_lab
    for _ in range(2):
        lab.submit("-C", "aws-a")  # only aws-a fits: no other template to go to
    assert "launched 2" in lab.once()
    time.sleep(5)  # past the 4 s boot timeout
    assert "failed 2" in lab.once()
    assert protected(lab) == {"aws-a"}
    for _ in range(3):
        lab.once()
    # at most the limit plus one batch was paid for, whatever the queue still asks for
    assert launched(lab) == 2 <= LIMIT + 2
    assert lab.instances() == []


def test_the_cycle_that_fails_a_batch_protects_the_template_before_it_plans(
    broken_image_batch_lab: AwsLab,
) -> None:
    """Issue 21: the cycle that judged the first batch's boot timeouts still launched a
    second batch for the jobs left pending (protection was read from the cycle's starting
    snapshot). Now the cycle's own failures count before the plan: one batch is all that is
    paid for, and every held node of the template says why in Slurm."""
    lab = broken_image_batch_lab
    for _ in range(4):
        lab.submit("-C", "aws-a")
    assert "launched 2" in lab.once()
    time.sleep(5)  # past the 4 s boot timeout
    out = lab.once()
    assert "launched 0" in out and "failed 2" in out, out
    assert protected(lab) == {"aws-a"}
    lab.once()
    assert launched(lab) == 2
    reasons = {node: slurm_reason(lab, node) for node in ("aws-1", "aws-2", "aws-3", "aws-4")}
    held = "clustermgr: (Code:PROTECTED) 2 launch/boot failures in a row (last BOOT_TIMEOUT)"
    assert all(r.startswith(held) for r in reasons.values()), reasons


def test_slurm_mode_broken_image_pays_for_at_most_the_limit_plus_one_batch(
    broken_image_slurm_lab: AwsLab,
) -> None:
    """The runaway of issue 9: Slurm resumes nodes for its jobs, their instances never
    register, Slurm requeues the jobs and resumes again. Protected mode stops the loop."""
    lab = broken_image_slurm_lab
    jobs = [lab.submit("-C", "aws-a") for _ in range(4)]  # one batch: aws-[1-4]
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline and not protected(lab):
        lab.once()
        time.sleep(1)
    assert protected(lab) == {"aws-a"}
    for _ in range(5):  # Slurm keeps asking: nothing more is launched
        lab.once()
        time.sleep(1)
    assert launched(lab) <= LIMIT + 4, launched(lab)
    assert lab.instances() == []
    reasons = {lab.node(f"aws-{i}").get("Reason", "") for i in range(1, 5)}
    assert any("(Code:PROTECTED)" in r or "(Code:BOOT_TIMEOUT)" in r for r in reasons), reasons
    assert all(lab.job(job, "JobState") in ("PENDING", "CONFIGURING") for job in jobs)


def test_failed_launches_protect_the_template_until_an_admin_resets_it(quota_lab: AwsLab) -> None:
    lab = quota_lab
    lab.fake.fail_next_launches("VcpuLimitExceeded", attempts=50)
    jobs = [lab.submit("-C", "aws-a") for _ in range(2)]
    assert "failed 2" in lab.once()  # (Code:QUOTA) twice: the limit
    assert protected(lab) == {"aws-a"}
    calls = lab.fake.calls().get("CreateFleet", 0)
    out = lab.once()
    assert "launched 0" in out and lab.fake.calls().get("CreateFleet", 0) == calls, out
    # the nodes were held while their launches failed: the jobs were never placed on them,
    # so they wait as they were, not requeued behind Slurm's ~2-minute BeginTime hold
    for job in jobs:
        assert (lab.job(job, "JobState"), lab.job(job, "Restarts")) == ("PENDING", "0")
        # None only when cm-scale's comment (its verdict) cleared Slurm's reason
        seen = lab.slurm.run("squeue", "-h", "-j", job, "-o", "%r|%k").stdout.strip()
        reason, comment = seen.split("|", 1)
        assert reason != "BeginTime", seen
        assert reason != "None" or comment.startswith("clustermgr: "), seen
    dry = json.loads(lab.run("cm-scale", "--dry-run", "--json").stdout)
    refused = [row for row in dry if row["action"] == "refused"]
    assert refused and refused[0]["reason"].startswith("(Code:PROTECTED) 2 launch/boot"), dry
    status = lab.run("clustermgr", "status").stdout
    assert "aws-a: PROTECTED (Code:PROTECTED) 2 launch/boot failures in a row" in status
    listed = json.loads(lab.run("clustermgr", "templates", "list", "--json").stdout)
    assert listed[0]["failures_in_a_row"] == 2

    unknown = lab.run("clustermgr", "templates", "reset", "no-such-template")
    assert unknown.returncode == 2 and "no template named" in unknown.stderr
    lab.fake.clear_faults()
    assert lab.run("clustermgr", "templates", "reset", "aws-a").returncode == 0
    assert protected(lab) == set()
    assert "launched 2" in lab.once()  # it launches again at once

"""cm-scale as a real process with a template naming an image definition whose base AMI
lives in another region: the first launch waits for the region's copy (`(Code:IMAGE)`, no
failed launch counted toward protected mode) while cm-scale starts the copy itself, the
next boots the copy; a definition broken on disk is refused at the reload, the running
configuration kept.

The edges of the world are those of test_daemon_schedule.py: moto's EC2 (CopyImage
included) and stand-in Slurm clients.
"""

from __future__ import annotations

import signal
from pathlib import Path

import boto3
import pytest

from clustermgr.scaling.protection import COUNTED
from tests.fakes.aws_harness import ACCESS_KEY, IMAGE, SECRET_KEY
from tests.integration.test_daemon_schedule import Lab, lab, prepare, wait_until

pytestmark = pytest.mark.integration
__all__ = ["lab"]  # the fixture

BASE_REGION = "us-west-2"  # the base AMI's region; the provider's is the fake's, us-east-1
USER_DATA = "#cloud-config\n# image @{image} revision @{revision}\nbootstrap: @{bootstrap_b64}\n"


def with_definition(lab: Lab) -> Path:
    """images/node.toml (AMI in BASE_REGION), and the template naming it."""
    defs = lab.workdir / "defs"
    defs.mkdir()
    (defs / "node.tmpl").write_text(USER_DATA)
    (defs / "node.toml").write_text(
        f'name = "node"\ntree = "{lab.workdir}"\nuser_data = "node.tmpl"\n'
        f'[base.aws]\nimage = "{IMAGE}"\nregion = "{BASE_REGION}"\n'
    )
    prepare(lab, f'[images]\ndefinitions_dir = "{defs}"\n', interval_s=3)
    text = lab.config.read_text()
    assert text.count(f'image = "{IMAGE}"') == 1
    lab.config.write_text(text.replace(f'image = "{IMAGE}"', 'image = "node"'))
    return defs


def scontrol_log(lab: Lab) -> str:
    path = lab.bin_dir / "scontrol.log"
    return path.read_text() if path.exists() else ""


def test_a_missing_regional_copy_holds_launches_and_cm_scale_starts_it(lab: Lab) -> None:
    defs = with_definition(lab)
    lab.fake.fail_next("RequestLimitExceeded", attempts=10_000, actions=["CopyImage"])
    lab.start()
    pending = f"image copies: node to {lab.fake.region} pending ("
    wait_until(lambda: lab.lines(pending), 60, "the copy asked for, throttled")

    lab.resume("aws-1")
    wait_until(lambda: "(Code:IMAGE)" in scontrol_log(lab), 60, "the refused node")
    # the requested node was refused with the wait, not failed by a launch
    said = scontrol_log(lab)
    assert f"(Code:IMAGE) waiting for image node in {lab.fake.region}: {IMAGE}" in said
    assert "is being copied (requested)" in said
    kinds = {k for (k,) in lab.query("SELECT reason_kind FROM node_events WHERE reason_kind!=''")}
    assert "IMAGE" in kinds and not kinds & set(COUNTED), kinds
    assert lab.query("SELECT count(*) FROM nodes WHERE instance_id IS NOT NULL") == [(0,)]

    lab.fake.clear_faults()  # the throttling ends: the next cycle's request is accepted
    available = f"image copies: node to {lab.fake.region} available"
    wait_until(lambda: lab.lines(available), 60, "the copy accepted and seen available")
    [(copy_id, state, source)] = lab.query(
        "SELECT image_id, state, source_image FROM machine_images WHERE image_name = 'node'"
    )
    assert state == "available" and source == IMAGE and copy_id != IMAGE

    lab.resume("aws-2")
    wait_until(lambda: lab.lines("cycle: launched 1"), 60, "the launch from the copy")
    session = boto3.Session(ACCESS_KEY, SECRET_KEY, region_name=lab.fake.region)
    ec2 = session.client("ec2", endpoint_url=lab.fake.url)
    [instance] = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert instance["ImageId"] == copy_id

    # a definition broken on disk: the reload is refused in one line, the old config runs
    (defs / "node.toml").write_text('name = "node"\n')
    assert lab.daemon is not None
    lab.daemon.send_signal(signal.SIGHUP)
    wait_until(lambda: lab.lines("reload refused"), 30, "the refused reload")
    [line] = lab.lines("reload refused")
    assert "keeping the running config" in line and "node.toml: tree: " in line, line
    lab.resume("aws-3")
    wait_until(lambda: len(lab.lines("cycle: launched 1")) >= 2, 60, "a launch after it")
    assert lab.daemon.poll() is None, lab.said()[-2000:]

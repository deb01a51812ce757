"""Someone with the cloud account's credentials launches instances that carry the cluster's
tags (one of them also `clustermgr-role=director`): cm-scale, running as the daemon against
a real slurmctld and the AWS SDK over the moto fake, never terminates, adopts or counts
them; it reports them as foreign (status, one event each, a metric, policy dry-run), while
an instance of its own that was never bound (request id committed, the node's naming
failed) is still terminated after the grace period.

The attacker here is anyone with access to the cloud account, not a local user: no
`as_user`. The CLI runs as root, as an admin would run it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent
from tests.conftest import cannot_run
from tests.e2e.test_aws_burst import BIN, AwsLab, make_lab
from tests.fakes.aws_harness import ACCESS_KEY, IMAGE, SECRET_KEY
from tests.labs.slurmlab import free_port

GRACE_S = 4
CLUSTER_TAGS = {"clustermgr-cluster": "e2e", "clustermgr-template": "aws-a"}


@pytest.fixture
def lab() -> Iterator[AwsLab]:
    if os.geteuid() != 0 or shutil.which("slurmctld", path="/usr/sbin:/usr/bin") is None:
        cannot_run("needs root and slurmctld (a real controller for cm-scale to read)")
    lab_dir = Path(tempfile.mkdtemp(prefix="cm-sec-foreign-", dir="/tmp"))
    lab_dir.chmod(0o755)  # the hooks run as SlurmUser and must reach the config
    try:
        yield from make_lab(lab_dir, "policy")
    finally:
        shutil.rmtree(lab_dir, ignore_errors=True)


def ec2(lab: AwsLab) -> Any:
    import boto3

    return boto3.client(
        "ec2",
        region_name=lab.fake.region,
        endpoint_url=lab.fake.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )


def attacker_launch(client: Any, tags: dict[str, str]) -> str:
    """RunInstances with the cloud account's credentials, outside cm-scale."""
    answer = client.run_instances(
        ImageId=IMAGE,
        InstanceType="p4d.24xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
        ],
    )
    return str(answer["Instances"][0]["InstanceId"])


def state_of(client: Any, instance_id: str) -> str:
    reservations = client.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


def our_unbound_instance(lab: AwsLab) -> str:
    """A launch whose naming fails after the fleet started: the node fails and moves on,
    the instance runs with the request id cm-scale committed before the launch, bound to
    nothing (what a crash or a cloud error between launch and binding leaves behind)."""
    lab.fake.fail_next("UnauthorizedOperation", attempts=1, actions=["CreateTags"])
    job = lab.submit("-C", "aws-a")
    out = lab.once()
    assert "failed 1" in out, out
    lab.slurm.run("scancel", job)  # nothing asks for a new launch meanwhile
    [ours] = [i for i in lab.instances() if not i["node"]]
    assert ours["request_id"], ours
    return str(ours["instance_id"])


@contextlib.contextmanager
def daemon_running(lab: AwsLab) -> Iterator[int]:
    """cm-scale as systemd runs it: 1 s cycles, the orphan grace short, metrics on a port;
    SIGTERM (by pid) at the end. Yields the metrics port."""
    port = free_port()
    config = lab.config.read_text().replace("metrics_port = 0", f"metrics_port = {port}")
    lab.config.write_text(config + f"interval_s = 1\norphan_grace_s = {GRACE_S}\n")
    log = (lab.workdir / "cm-scale.log").open("w")
    process = subprocess.Popen(
        [str(BIN / "cm-scale")], env=lab.env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


def wait_for(condition: Any, timeout_s: float, what: str, lab: AwsLab) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            log = (lab.workdir / "cm-scale.log").read_text()[-3000:]
            raise AssertionError(f"timed out waiting for {what}; cm-scale's log:\n{log}")
        time.sleep(0.5)


def foreign_events(lab: AwsLab) -> list[str]:
    database = Database(f"sqlite:///{lab.workdir / 'cm.db'}")
    try:
        with database.session() as session:
            query = select(ClusterEvent.message).where(ClusterEvent.kind == "foreign")
            return list(session.scalars(query))
    finally:
        database.dispose()


def test_instances_that_only_carry_the_clusters_tags_are_reported_and_never_terminated(
    lab: AwsLab,
) -> None:
    client = ec2(lab)
    ours = our_unbound_instance(lab)
    forged = attacker_launch(
        client, {**CLUSTER_TAGS, "clustermgr-request": "r-forged", "clustermgr-node": "aws-3"}
    )
    director = attacker_launch(client, {**CLUSTER_TAGS, "clustermgr-role": "director"})
    foreign = {forged, director}
    for instance_id in (ours, forged, director):
        assert state_of(client, instance_id) == "running"

    with daemon_running(lab) as port:
        wait_for(lambda: state_of(client, ours) != "running", 60, "our orphan to go", lab)
        first = json.loads(lab.run("clustermgr", "status", "--json").stdout)
        time.sleep(GRACE_S)  # several more 1 s cycles, all past the grace period
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
        metrics = scrape.read().decode()

    assert state_of(client, ours) in ("shutting-down", "terminated")
    assert {state_of(client, i) for i in foreign} == {"running"}

    status = json.loads(lab.run("clustermgr", "status", "--json").stdout)
    listed = {f["instance_id"]: f for f in status["foreign_instances"]}
    assert set(listed) == foreign
    assert (listed[forged]["template_tag"], listed[forged]["request_tag"]) == ("aws-a", "r-forged")
    assert listed[director]["role_tag"] == "director"
    assert {f["instance_id"]: f["since"] for f in first["foreign_instances"]} == {
        i: listed[i]["since"] for i in foreign
    }  # since when: the first sighting, not the last cycle
    assert "2 foreign instances left alone" in first["daemon"]["last_cycle"], first["daemon"]
    table = lab.run("clustermgr", "status").stdout
    assert re.search(rf"FOREIGN aws1 {forged} \(template tag aws-a, request tag r-forged\)", table)
    assert f"FOREIGN aws1 {director} (template tag aws-a, request tag -, role tag director)" in (
        table
    )

    events = foreign_events(lab)
    assert sorted(e.split()[3] for e in events) == sorted(foreign), events  # once each
    assert 'clustermgr_foreign_instances{provider="aws1"} 2.0' in metrics

    nodes = json.loads(lab.run("clustermgr", "nodes", "list", "--json").stdout)
    assert not foreign & {str(n["instance_id"]) for n in nodes}  # never adopted
    assert all(n["state"] == "POWERED_DOWN" for n in nodes)  # never counted as capacity

    dry = lab.run("clustermgr", "policy", "dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    rows = [r for r in json.loads(dry.stdout) if r["action"] == "verdict:foreign"]
    assert sorted(r["reason"].split()[1].rstrip(":") for r in rows) == sorted(foreign)
    assert not [r for r in json.loads(dry.stdout) if r["action"] == "verdict:orphan"]

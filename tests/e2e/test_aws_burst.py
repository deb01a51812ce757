"""cm-scale against a real slurmctld and the AWS SDK over the moto fake.

No slurmd stands behind a moto instance: nodes reach POWERING_UP with their addresses set
and never register, which is enough to follow launches, fallbacks and failures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.aws_fake import FakeAws
from tests.fakes.aws_harness import ACCESS_KEY, IMAGE, SECRET_KEY
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

BIN = Path(sys.executable).parent
HOOKS = ("resume", "suspend", "resume-fail")


@dataclass
class AwsLab:
    slurm: SlurmLab
    fake: FakeAws
    workdir: Path
    config: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            **self.slurm.env,
            "CLUSTERMGR_CONFIG": str(self.config),
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / program), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
            check=False,
        )

    def once(self) -> str:
        done = self.run("cm-scale", "--once")
        return done.stdout + done.stderr

    def node(self, name: str) -> dict[str, str]:
        return self.slurm.node_fields(name)

    def instances(self) -> list[dict[str, object]]:
        data: list[dict[str, object]] = json.loads(
            self.run("clustermgr", "providers", "instances", "aws1", "--json").stdout
        )
        return data

    def submit(self, *args: str) -> str:
        """sbatch, then wait until Slurm's scheduler has looked at the job (Reason set)."""
        job = self.slurm.run(
            "sbatch",
            "--parsable",
            "-p",
            "gpu",
            "--chdir",
            str(self.workdir),
            "--output",
            f"{self.workdir}/%j.out",
            *args,
            "--wrap",
            "hostname",
        ).stdout.strip()
        deadline = time.monotonic() + 20
        while self.job(job, "JobState") == "PENDING" and self.job(job, "Reason") == "None":
            assert time.monotonic() < deadline, "the scheduler never looked at the job"
            time.sleep(0.3)
        return job

    def job(self, job_id: str, field: str) -> str:
        out = self.slurm.run("scontrol", "show", "job", job_id, "-o").stdout
        return next((w.split("=", 1)[1] for w in out.split() if w.startswith(f"{field}=")), "")


DEFAULT_PRICES = 'prices = { "p4d.24xlarge" = { on_demand = 32.77 } }'  # a lab's own extra wins


def write_config(
    lab_dir: Path,
    slurm: SlurmLab,
    fake: FakeAws,
    subnets: list[str],
    mode: str,
    boot_timeout_s: int,
    b_provider: str = "aws1",
    extra: str = "",
    b_extra: str = "",
    chain: str = '[{ name = "queue_depth" }]',
    a_nodes: int = 4,
) -> Path:
    config = lab_dir / "clustermgr.toml"
    config.write_text(
        f"""
[cluster]
name = "e2e"
head_address = "{slurm.conf_server}"
[database]
url = "sqlite:///{lab_dir / "cm.db"}"
[[providers]]
name = "aws1"
type = "aws"
region = "{fake.region}"
endpoint_url = "{fake.url}"
retry_mode = "standard"
[[templates]]
name = "aws-a"
provider = "aws1"
partition = "gpu"
nodes = "aws-[1-{a_nodes}]"
instance_types = ["p4d.24xlarge", "p4de.24xlarge"]
{"" if "prices =" in extra else DEFAULT_PRICES}
image = "{IMAGE}"
subnets = {json.dumps(subnets)}
cpus = 2
memory_mb = 1000
demand_mode = "{mode}"
boot_timeout_s = {boot_timeout_s}
fallback_templates = ["aws-b"]
{extra.replace("@REGION@", fake.region).replace("@URL@", fake.url)}
[[templates]]
name = "aws-b"
provider = "{b_provider}"
partition = "gpu"
nodes = "awsb-[1-2]"
instance_types = ["g5.12xlarge"]
image = "{IMAGE}"
subnets = {json.dumps(subnets)}
cpus = 2
memory_mb = 1000
demand_mode = "{mode}"
boot_timeout_s = {boot_timeout_s}
{b_extra}
[policy]
chain = {chain}
[daemon]
state_dir = "{lab_dir / "state"}"
heartbeat_stale_s = 3600
metrics_port = 0
"""
    )
    return config


def make_lab(
    lab_dir: Path, mode: str, boot_timeout_s: int = 600, a_nodes: int = 4, **config: str
) -> Iterator[AwsLab]:
    fake = FakeAws().start()
    hooks = {}
    for kind in HOOKS:
        wrapper = lab_dir / f"hook-{kind}"
        wrapper.write_text(
            f"#!/bin/sh\nCLUSTERMGR_CONFIG='{lab_dir / 'clustermgr.toml'}' "
            f"exec '{BIN / f'clustermgr-slurm-{kind}'}' \"$@\"\n"
        )
        wrapper.chmod(0o755)
        hooks[kind] = str(wrapper)
    slurm = SlurmLab(
        lab_dir / "slurm",
        [
            NodeGroup(
                f"aws-[1-{a_nodes}]",
                cpus=2,
                memory_mb=1000,
                features=("aws1", fake.region, "aws-a"),
            ),
            NodeGroup(
                "awsb-[1-2]",
                cpus=2,
                memory_mb=1000,
                features=(config.get("b_provider", "aws1"), fake.region, "aws-b"),
                weight=10,
            ),
        ],
        [Partition("gpu", f"aws-[1-{a_nodes}],awsb-[1-2]", default=True)],
        resume_program=hooks["resume"],
        suspend_program=hooks["suspend"],
        resume_fail_program=hooks["resume-fail"],
        suspend_time=3600,
        resume_timeout=3600,  # > boot + 2 cycles + a fallback's boot (config check)
        # outlasts a cycle, as `clustermgr slurm conf`'s 120 s outlasts the daemon's interval:
        # a slot Slurm powers down after a failed launch is held again before it is free
        suspend_timeout=20,
    )
    try:
        slurm.start()
        import boto3

        ec2 = boto3.client(
            "ec2",
            region_name=fake.region,
            endpoint_url=fake.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        # a VPC of its own in an address range no lab routes (198.18.0.0/15, RFC 2544): in
        # the default VPC's 172.31.0.0/16 this lab's slurmctld would reach, and signal, the
        # slurmd that a cloud lab running beside it (xdist) boots at the same address
        vpc = ec2.create_vpc(CidrBlock="198.18.0.0/16")["Vpc"]["VpcId"]
        zones = [z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]]
        subnets = [
            ec2.create_subnet(VpcId=vpc, CidrBlock=f"198.18.{i}.0/24", AvailabilityZone=zone)[
                "Subnet"
            ]["SubnetId"]
            for i, zone in enumerate(zones[:2], start=1)
        ]
        path = write_config(
            lab_dir, slurm, fake, subnets, mode, boot_timeout_s, a_nodes=a_nodes, **config
        )
        lab = AwsLab(slurm, fake, lab_dir, path)
        assert lab.run("clustermgr", "db", "upgrade").returncode == 0
        assert lab.run("clustermgr", "nodes", "sync").returncode == 0
        first = lab.run("cm-scale", "--once")  # spool, heartbeat, the policy-mode hold
        assert first.returncode == 0, first.stderr
        yield lab
    finally:
        slurm.stop()
        fake.stop()


@pytest.fixture
def policy_lab(lab_dir: Path) -> Iterator[AwsLab]:
    yield from make_lab(lab_dir, "policy")


@pytest.fixture
def slurm_lab(lab_dir: Path) -> Iterator[AwsLab]:
    yield from make_lab(lab_dir, "slurm", boot_timeout_s=4)


def test_demand_launches_one_fleet_binds_names_and_sets_addresses(policy_lab: AwsLab) -> None:
    lab = policy_lab
    job = lab.submit("-N", "2")
    assert "launched 2" in lab.once()
    assert lab.fake.calls().get("CreateFleet") == 1
    instances = lab.instances()
    assert sorted(str(i["node"]) for i in instances) == ["aws-1", "aws-2"]
    assert {i["template"] for i in instances} == {"aws-a"}
    for inst in instances:
        fields = lab.node(str(inst["node"]))
        assert fields["NodeAddr"] == inst["private_address"]
        assert "POWERING_UP" in fields["State"] or "POWER" in fields["State"]
    assert lab.job(job, "JobState") in ("CONFIGURING", "PENDING")
    lab.once()  # a second cycle launches nothing more: the nodes are coming
    assert len(lab.instances()) == 2 and lab.fake.calls().get("CreateFleet") == 1
    # no daemon runs (cycles by --once): status still says what runs, what it costs and
    # what the last cycle saw pending
    shown = json.loads(lab.run("clustermgr", "status", "--json").stdout)
    assert shown["daemon"] is None and shown["instances_running"] == 2
    # (the job is pending or already given the booting nodes, as Slurm decides)
    assert shown["hourly_cost"] == 2 * 32.77 and shown["pending_jobs"] in (0, 1)
    assert shown["pending_as_of"] is not None
    table = lab.run("clustermgr", "status").stdout
    assert "running: 2 instances, $65.54/h" in table
    node = json.loads(lab.run("clustermgr", "nodes", "show", "aws-1", "--json").stdout)
    assert node["slurm_state"] and node["slurm_state_as_of"] == shown["pending_as_of"]
    fields = lab.run("clustermgr", "nodes", "show", "aws-1").stdout
    assert "(as the cycle of 20" in fields
    assert f"pending at the last cycle ({shown['pending_as_of'][:10]}" in table
    assert f": {shown['pending_jobs']} jobs" in table


def test_capacity_on_the_first_type_falls_back_to_the_next(policy_lab: AwsLab) -> None:
    lab = policy_lab
    lab.fake.no_capacity_for(["p4d.24xlarge"])
    lab.submit()
    assert "launched 1" in lab.once()
    [instance] = lab.instances()
    assert (instance["template"], instance["instance_type"]) == ("aws-a", "p4de.24xlarge")


def test_no_capacity_in_a_template_falls_back_to_the_next_template(policy_lab: AwsLab) -> None:
    lab = policy_lab
    lab.fake.no_capacity_for(["p4d.24xlarge", "p4de.24xlarge"])  # every type of aws-a
    job = lab.submit()
    out = lab.once()
    assert "launched 1" in out and "failed 1" in out, out
    [instance] = lab.instances()
    assert (instance["template"], instance["node"]) == ("aws-b", "awsb-1")
    assert instance["instance_type"] == "g5.12xlarge"
    history = json.loads(lab.run("clustermgr", "nodes", "history", "aws-1", "--json").stdout)
    assert history[-2]["new_state"] == "FAILED"
    assert history[-2]["reason"].startswith("(Code:CAPACITY)")
    assert history[-1]["new_state"] == "POWERED_DOWN"
    assert lab.job(job, "JobState") in ("CONFIGURING", "PENDING")


SECOND_PROVIDER = """
[[providers]]
name = "aws2"
type = "aws"
region = "@REGION@"
endpoint_url = "@URL@"
retry_mode = "standard"
max_instances = 1
"""


@pytest.fixture
def capped_lab(lab_dir: Path) -> Iterator[AwsLab]:
    """aws-b on a provider of its own (the same fake cloud) that allows one instance."""
    yield from make_lab(lab_dir, "policy", b_provider="aws2", extra=SECOND_PROVIDER)


def test_a_fallback_to_another_provider_stops_at_its_max_instances(capped_lab: AwsLab) -> None:
    """Two nodes of aws-a find no capacity; aws-b, on a provider capped at one instance, takes
    one of them: the other fails with why no fallback took it, and a refusal is recorded."""
    lab = capped_lab
    lab.fake.no_capacity_for(["p4d.24xlarge", "p4de.24xlarge"])  # every type of aws-a
    lab.submit("-N", "2")
    out = lab.once()
    assert "launched 1" in out and "failed 2" in out, out
    listed = json.loads(lab.run("clustermgr", "providers", "instances", "aws2", "--json").stdout)
    assert [(i["template"], i["node"]) for i in listed] == [("aws-b", "awsb-1")]
    assert slurm_reason(lab, "aws-1").startswith("(Code:CAPACITY)")
    refused = slurm_reason(lab, "aws-2")
    assert refused.startswith("(Code:CAPACITY)") and "fallback covers 1 of 2" in refused
    cut = "fallback covers 1 of 2 nodes (aws-b: 1 of 2 nodes (max_instances of provider aws2))"
    history = json.loads(lab.run("clustermgr", "nodes", "history", "aws-2", "--json").stdout)
    assert history[-2]["new_state"] == "FAILED" and cut in history[-2]["reason"], history


TEN = '"p4d.24xlarge" = { on_demand = 10.0 }'


@pytest.fixture
def budget_lab(lab_dir: Path) -> Iterator[AwsLab]:
    """aws-a at $10/h, its fallback aws-b at $30/h, and a budget of $40/h."""
    yield from make_lab(
        lab_dir,
        "policy",
        extra=f"prices = {{ {TEN}, {TEN.replace('p4d', 'p4de')} }}",
        b_extra='prices = { "g5.12xlarge" = { on_demand = 30.0 } }',
        chain='[{ name = "queue_depth" }, { name = "budget_cap", options = { hourly = 40 } }]',
    )


def test_budget_cap_judges_a_launch_at_its_dearest_fallback(budget_lab: AwsLab) -> None:
    """Two one-node jobs: two nodes of aws-a ($20/h) would fit the $40/h cap, but if the
    cloud has no capacity they become two of aws-b ($60/h). The cap counts the dearer
    price: one node is launched (here through the fallback) and one refused, with why."""
    lab = budget_lab
    lab.fake.no_capacity_for(["p4d.24xlarge", "p4de.24xlarge"])
    lab.submit()
    lab.submit()
    out = lab.once()
    assert "launched 1" in out and "failed 1" in out, out
    assert [(i["template"], i["node"]) for i in lab.instances()] == [("aws-b", "awsb-1")]
    plan = lab.run("clustermgr", "policy", "dry-run").stdout  # the refusal, as users see it
    assert "budget_cap:" in plan and "nodes refused (cap $40.00/h; now $30.00/h" in plan, plan


def slurm_reason(lab: AwsLab, node: str) -> str:
    return lab.slurm.run("sinfo", "-h", "-N", "-n", node, "-o", "%E").stdout.strip()


def queued(lab: AwsLab, job: str) -> tuple[str, str, str]:
    """(squeue's state, squeue's reason, scontrol's Restarts) of a job."""
    state, reason = (
        lab.slurm.run("squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip().split("|")
    )
    return state, reason, lab.job(job, "Restarts")


def test_policy_mode_failed_launch_leaves_the_job_pending_not_requeued(policy_lab: AwsLab) -> None:
    """The node is powered up while still held (drained), and the hold is released only once
    the cloud accepted the launch: a quota error leaves the job pending as it was, never
    placed on the node and so not requeued with Slurm's ~2-minute BeginTime hold."""
    lab = policy_lab
    lab.fake.fail_next_launches("VcpuLimitExceeded", attempts=50)
    # a cloud takes seconds to refuse: time enough for Slurm to place the job on a node it may use
    lab.fake.slow(5, actions=["CreateFleet"])
    job = lab.submit("-C", "aws-a")
    out = lab.once()
    assert "failed 1" in out, out
    assert slurm_reason(lab, "aws-1").startswith("(Code:QUOTA) ")
    state, reason, restarts = queued(lab, job)
    assert (state, restarts) == ("PENDING", "0") and reason != "BeginTime", (state, reason)
    assert lab.instances() == []
    history = json.loads(lab.run("clustermgr", "nodes", "history", "aws-1", "--json").stdout)
    last = [h["new_state"] for h in history][-3:]
    assert last == ["LAUNCHING", "FAILED", "POWERED_DOWN"], history
    assert history[-2]["reason"].startswith("(Code:QUOTA)")

    out = lab.once()  # the next launch fails too; the first slot is held again meanwhile
    assert "failed 1" in out, out
    held = "clustermgr: held until a policy launches it; last: (Code:QUOTA) "
    assert slurm_reason(lab, "aws-1").startswith(held)
    assert slurm_reason(lab, "aws-2").startswith("(Code:QUOTA) ")
    state, reason, restarts = queued(lab, job)
    assert (state, restarts) == ("PENDING", "0") and reason != "BeginTime", (state, reason)


def test_unrecoverable_error_requeues_the_job_and_frees_the_nodes(slurm_lab: AwsLab) -> None:
    lab = slurm_lab
    lab.fake.fail_next_launches("VcpuLimitExceeded", attempts=50)
    job = lab.submit()
    deadline = time.monotonic() + 30
    while not list((lab.workdir / "state" / "spool").glob("*.json")):
        assert time.monotonic() < deadline, "Slurm never called the resume hook"
        time.sleep(0.5)
    node = lab.job(job, "NodeList")
    out = lab.once()
    assert "failed 1" in out, out
    assert lab.job(job, "JobState") == "PENDING"
    assert lab.job(job, "Restarts") == "1"
    assert lab.instances() == []
    fields = lab.node(node)
    assert fields["Reason"].startswith("(Code:QUOTA)")
    history = json.loads(lab.run("clustermgr", "nodes", "history", node, "--json").stdout)
    assert any(
        h["new_state"] == "FAILED" and h["reason"].startswith("(Code:QUOTA)") for h in history
    )
    deadline = time.monotonic() + 60
    while (
        "POWERED_DOWN" not in lab.node(node)["State"] or "POWERING_DOWN" in lab.node(node)["State"]
    ):
        assert time.monotonic() < deadline, lab.node(node)["State"]
        time.sleep(1)


def test_node_that_never_registers_is_failed_after_the_boot_timeout(slurm_lab: AwsLab) -> None:
    lab = slurm_lab
    job = lab.submit()
    deadline = time.monotonic() + 30
    while not list((lab.workdir / "state" / "spool").glob("*.json")):
        assert time.monotonic() < deadline, "Slurm never called the resume hook"
        time.sleep(0.5)
    assert "launched 1" in lab.once()
    time.sleep(5)
    out = lab.once()
    assert "failed 1" in out or lab.instances() == [], out
    assert lab.instances() == []
    assert lab.job(job, "Restarts") == "1"
    history = json.loads(lab.run("clustermgr", "events", "--json").stdout)
    assert any(h["reason"].startswith("(Code:BOOT_TIMEOUT)") for h in history), history


def test_sigkill_mid_launch_leaves_no_duplicate_and_no_orphan(policy_lab: AwsLab) -> None:
    lab = policy_lab
    lab.submit("-N", "2")
    lab.fake.slow(20, attempts=1, actions=["CreateTags"])  # binding hangs after the fleet
    victim = subprocess.Popen(
        [str(BIN / "cm-scale"), "--once"],
        env=lab.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while lab.fake.calls().get("CreateTags", 0) < 1:
        assert time.monotonic() < deadline, lab.fake.calls()
        assert victim.poll() is None, "cm-scale finished before it could be killed"
        time.sleep(0.1)
    victim.kill()  # SIGKILL: instances exist, nothing bound in the database
    victim.wait(10)
    lab.fake.clear_faults()
    assert lab.fake.calls().get("CreateFleet") == 1
    lab.once()
    # the relaunch adopts the fleet's two instances by their request tag: nothing re-issued
    # (a cloud that ignored the ClientToken would otherwise start a second set)
    assert lab.fake.calls().get("CreateFleet") == 1
    instances = lab.instances()
    assert len(instances) == 2
    nodes = {
        r["name"]: r for r in json.loads(lab.run("clustermgr", "nodes", "list", "--json").stdout)
    }
    bound = {str(nodes[n]["instance_id"]) for n in ("aws-1", "aws-2")}
    assert bound == {str(i["instance_id"]) for i in instances}  # every instance held: no orphan
    assert {nodes[n]["state"] for n in ("aws-1", "aws-2")} == {"BOOTING"}


def test_no_requeue_job_on_a_failed_burst_ends(slurm_lab: AwsLab) -> None:
    lab = slurm_lab
    lab.fake.fail_next_launches("VcpuLimitExceeded", attempts=50)
    job = lab.submit("--no-requeue")
    deadline = time.monotonic() + 30
    while not list((lab.workdir / "state" / "spool").glob("*.json")):
        assert time.monotonic() < deadline, "Slurm never called the resume hook"
        time.sleep(0.5)
    assert "failed 1" in lab.once()
    deadline = time.monotonic() + 30
    while lab.job(job, "JobState") in ("CONFIGURING", "PENDING", "RUNNING"):
        assert time.monotonic() < deadline, lab.job(job, "JobState")
        time.sleep(0.5)
    assert lab.job(job, "JobState") in ("NODE_FAIL", "FAILED", "CANCELLED")
    assert lab.job(job, "Restarts") == "0"


def test_slurm_unreachable_acts_on_nothing_and_says_so(policy_lab: AwsLab) -> None:
    lab = policy_lab
    lab.submit()
    lab.slurm.stop()
    done = lab.run("cm-scale", "--once", "--skip-slurm-check")
    assert done.returncode == 1
    assert done.stdout.strip().startswith("cycle failed: Slurm could not be read, nothing done:")
    assert lab.instances() == [] and lab.fake.calls().get("CreateFleet") is None


WHOLE = 'scaling_strategy = "all-or-nothing"'


@pytest.fixture
def whole_lab(lab_dir: Path) -> Iterator[AwsLab]:
    """aws-a (8 slots, p4d then p4de) and its fallback aws-b (2 slots) launch each job's
    nodes all or nothing."""
    yield from make_lab(lab_dir, "policy", a_nodes=8, extra=WHOLE, b_extra=WHOLE)


def test_a_job_short_of_capacity_on_the_first_type_starts_whole_on_the_next(
    whole_lab: AwsLab,
) -> None:
    lab = whole_lab
    lab.fake.limit_capacity(3, "p4d.24xlarge")
    job = lab.submit("-N", "4")
    out = lab.once()
    assert "launched 4" in out and "failed" not in out, out
    instances = lab.instances()
    assert sorted(str(i["node"]) for i in instances) == ["aws-1", "aws-2", "aws-3", "aws-4"]
    assert {i["instance_type"] for i in instances} == {"p4de.24xlarge"}
    assert lab.fake.calls().get("CreateFleet") == 3  # p4d in each subnet, then p4de
    assert lab.job(job, "JobState") in ("CONFIGURING", "PENDING")


def test_two_jobs_of_four_against_capacity_for_six_launch_exactly_one_job(
    whole_lab: AwsLab,
) -> None:
    """The second job finds room for 2 of its 4 nodes: none start, its nodes go back to the
    pool with the reason, and its fallback (2 slots) cannot take it whole. A cycle later
    the four booting nodes count as coming for one job only: the other is launched for
    again."""
    lab = whole_lab
    lab.fake.limit_capacity(6)
    first = lab.submit("-N", "4")
    second = lab.submit("-N", "4")
    out = lab.once()
    assert "launched 4" in out and "failed 4" in out, out
    instances = lab.instances()
    assert len(instances) == 4 and {i["template"] for i in instances} == {"aws-a"}
    launched = sorted(str(i["node"]) for i in instances)
    failed = sorted({f"aws-{i}" for i in range(1, 9)} - set(launched))
    reason = slurm_reason(lab, failed[0])
    assert reason.startswith("(Code:CAPACITY) AllOrNothing: all-or-nothing: got 0 of 4"), reason
    history = json.loads(lab.run("clustermgr", "nodes", "history", failed[0], "--json").stdout)
    assert [h["new_state"] for h in history][-2:] == ["FAILED", "POWERED_DOWN"], history
    assert "fallback covers 0 of 4 nodes (aws-b: 2 of 4 nodes" in history[-2]["reason"]
    for job in (first, second):
        assert lab.job(job, "JobState") in ("CONFIGURING", "PENDING")
    comments = sorted(
        lab.slurm.run("squeue", "-h", "-j", job, "-o", "%k").stdout.strip()
        for job in (first, second)
    )
    assert comments[0].startswith("clustermgr: waiting for aws-a nodes aws-"), comments
    assert comments[1].startswith("clustermgr: waiting: launch failed"), comments
    assert "(Code:CAPACITY) AllOrNothing" in comments[1], comments
    # Slurm's SuspendTimeout (20 s) frees the failed slots. Slurm places a job on the booting
    # nodes when it schedules right after their release; when a loaded slurmctld schedules
    # only after the slots are free (no daemon runs here to hold them again), it places a
    # job there instead, and the booting nodes wait for the other job: either way one job
    # holds nodes and the other's are still to launch
    deadline = time.monotonic() + 120

    def settled() -> bool:
        placed = any(lab.job(job, "NodeList") not in ("", "(null)") for job in (first, second))
        return placed and not any("POWERING_DOWN" in lab.node(n)["State"] for n in failed)

    while not settled():
        states = [lab.node(n)["State"] for n in launched + failed]
        assert time.monotonic() < deadline, (
            states,
            [lab.job(j, "NodeList") for j in (first, second)],
        )
        time.sleep(1)
    fleets = lab.fake.calls().get("CreateFleet", 0)
    out = lab.once()
    assert "failed 4" in out, out  # launched for again: still no capacity for all four
    assert lab.fake.calls().get("CreateFleet", 0) > fleets
    assert len(lab.instances()) == 4

"""cm-scale killed with SIGKILL inside the two crash windows that once left the cluster
stuck, then restarted: one reconcile cycle converges, and the jobs run.

Window 1: inside the failure path, after FAILED is committed, before Slurm is told and the
instance is terminated. The failure is a real one: the boot health check
(`clustermgr-health-check`, run by slurmd as its HealthCheckProgram inside the node's
namespace, against a fake nvidia-smi that shows 1 of 2 GPUs on the first boot) powers the
node down with `(Code:HEALTH)`, and the job must complete on the replacement.
Window 2: after the instances are bound (BOOTING), before Slurm is
told their addresses (it was asked to power them up before the launch: a node that booted
before its power-up request would never end POWERING_UP).
Window 3: after the addresses were told, before the launch's hold is released: the nodes
were powered up while still drained, so they boot and register held (IDLE+DRAIN) with no
job placed on them, and the restarted daemon releases them.

The daemon is caught in a window by the edge of the world: its Slurm client directory
holds an `scontrol` that stops dead on the call the test names (the real one for every
other call), so the kill lands exactly there. The whole process group is killed, as
systemd kills a unit's control group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import slurm_user_for_hooks
from tests.labs.burstlab import BurstLab, BurstLabSpec

FAKE_SMI = """#!/bin/sh
# One GPU short on the very first query of this test, healthy afterwards.
if [ ! -e '{mark}' ]; then
  : > '{mark}'
  echo "NVIDIA fake GPU, 0, No, No"
  exit 0
fi
echo "NVIDIA fake GPU, 0, No, No"
echo "NVIDIA fake GPU, 0, No, No"
"""
SLURM_CLIENTS = ("sinfo", "squeue", "sbatch", "scancel", "sacct", "srun", "sacctmgr")
BLOCKING_SCONTROL = """#!/bin/sh
# The real scontrol, except for the call named in {block}: that one never returns.
if [ -f '{block}' ]; then
  case " $* " in
    *"$(cat '{block}')"*) : > '{reached}'; exec sleep 600 ;;
  esac
fi
exec /usr/bin/scontrol "$@"
"""


class CrashLab:
    """A BurstLab whose cm-scale talks to Slurm through a blocking scontrol."""

    def __init__(self, lab: BurstLab):
        self.lab = lab
        self.block = lab.workdir / "block-scontrol"
        self.reached = lab.workdir / "scontrol-blocked"
        bin_dir = lab.workdir / "slurm-bin"
        bin_dir.mkdir()
        for client in SLURM_CLIENTS:
            (bin_dir / client).symlink_to(f"/usr/bin/{client}")
        scontrol = bin_dir / "scontrol"
        scontrol.write_text(BLOCKING_SCONTROL.format(block=self.block, reached=self.reached))
        scontrol.chmod(0o755)
        config = lab.config_path.read_text()
        lab.config_path.write_text(config.replace('bin_dir = "/usr/bin"', f'bin_dir = "{bin_dir}"'))

    def kill_inside(self, pattern: str, timeout_s: float = 240) -> int:
        """Run cm-scale cycles until one blocks on `pattern`, then SIGKILL its process group.
        Returns the number of cycles run."""
        self.block.write_text(pattern)
        deadline = time.monotonic() + timeout_s
        cycles = 0
        while time.monotonic() < deadline:
            cycles += 1
            victim = subprocess.Popen(
                [str(self.lab.bin_dir / "cm-scale"), "--once"],
                env=self.lab.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            while victim.poll() is None and not self.reached.exists():
                time.sleep(0.05)
            if self.reached.exists():
                os.killpg(victim.pid, signal.SIGKILL)
                victim.wait(10)
                self.block.unlink()
                return cycles
            time.sleep(2)
        self.block.unlink()
        raise TimeoutError(
            f"no cycle reached `scontrol ... {pattern}` in {timeout_s:.0f} s\n"
            f"{self.lab.diagnosis()}"
        )

    def nodes(self) -> dict[str, dict[str, object]]:
        rows = json.loads(self.lab.clustermgr("nodes", "list", "--json").stdout)
        return {str(r["name"]): r for r in rows}

    def slurm_node(self, name: str) -> dict[str, str]:
        out = self.lab.slurm("scontrol", "show", "node", name, "-o")
        return dict(w.split("=", 1) for w in out.split() if "=" in w)


def _dry_run(lab: BurstLab) -> str:
    done = lab._run([str(lab.bin_dir / "cm-scale"), "--dry-run", "--json"], check=True)
    return done.stdout


def powered_down_in_slurm(fields: dict[str, str]) -> bool:
    return "POWERED_DOWN" in fields.get("State", "") or "POWERING_DOWN" in fields.get("State", "")


def assert_converged(crash: CrashLab) -> None:
    """No FAILED node holds an instance; every running instance's node is known to Slurm
    at its address and not held powered down."""
    nodes = crash.nodes()
    stuck = [n for n, r in nodes.items() if r["state"] == "FAILED" and r["instance_id"]]
    assert stuck == [], nodes
    for instance in crash.lab.instances():
        node = str(instance["node"])
        fields = crash.slurm_node(node)
        assert fields.get("NodeAddr") == instance["private_address"], (node, fields)
        assert not powered_down_in_slurm(fields), (node, fields)
        assert nodes[node]["instance_id"] == instance["instance_id"], (node, nodes[node])


@pytest.fixture
def health_lab(lab_dir: Path) -> Iterator[CrashLab]:
    fake_bin = lab_dir / "fakebin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(mark=lab_dir / "first-boot-seen"))
    smi.chmod(0o755)
    wrapper = lab_dir / "health-check"
    check = Path(sys.executable).with_name("clustermgr-health-check")
    wrapper.write_text(
        "#!/bin/sh\n"
        f"PATH='{fake_bin}':/usr/bin:/bin SLURM_CONF='{lab_dir / 'slurm' / 'slurm.conf'}' "
        f"exec '{check}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    spec = BurstLabSpec(
        demand_mode="slurm",
        subnet="10.213.14.0/24",
        health_check=str(wrapper),
        slurm_user=slurm_user_for_hooks(),
    )
    lab = BurstLab(lab_dir, spec)
    try:
        yield CrashLab(lab.start())
    finally:
        lab.stop()


def test_killed_after_failed_is_committed_finishes_the_failure_next_cycle(
    health_lab: CrashLab,
) -> None:
    crash, lab = health_lab, health_lab.lab
    job = lab.sbatch("--wrap", "hostname")
    # the boot health check fails the first instance; cm-scale commits FAILED, then stops
    # dead telling Slurm (POWER_DOWN_FORCE), before the instance is terminated
    crash.kill_inside("state=POWER_DOWN_FORCE")
    failed = {n: r for n, r in crash.nodes().items() if r["state"] == "FAILED"}
    assert len(failed) == 1 and all(r["instance_id"] for r in failed.values()), failed
    (bad,) = failed
    assert str(failed[bad]["state_reason"]).startswith("(Code:HEALTH) boot:")
    assert [i["node"] for i in lab.instances()] == [bad]  # still running, still billed

    lab.cm_scale_once(check=True)  # the restarted daemon: one reconcile cycle
    assert_converged(crash)
    assert crash.nodes()[bad]["state"] == "POWERED_DOWN"
    assert lab.instances() == []

    # Slurm holds a job it requeued off a failed node for about two minutes (BeginTime); that
    # delay is Slurm's own and not under test here, so the test lifts it as an admin would
    assert lab.job_field(job, "JobState") == "PENDING"
    lab.slurm("scontrol", "update", f"jobid={job}", "StartTime=now")
    lab.run_until(lambda: lab.job_field(job, "JobState") == "COMPLETED", timeout_s=300, pause_s=3)
    assert lab.job_field(job, "Restarts") == "1"  # requeued off the bad node at once
    events = json.loads(lab.clustermgr("events", "--since", "1h", "--json").stdout)
    reasons = [e["reason"] for e in events if e["new_state"] == "FAILED"]
    failed_events = [e for e in events if e["new_state"] == "FAILED"]
    assert failed_events[0]["kind"] == "HEALTH"
    assert reasons and reasons[0].startswith("(Code:HEALTH) boot: 1 of 2 GPUs visible")
    assert len([e for e in events if e["new_state"] == "BOOTING"]) >= 2  # bad one + replacement


@pytest.fixture
def policy_lab(lab_dir: Path) -> Iterator[CrashLab]:
    spec = BurstLabSpec(demand_mode="policy", subnet="10.213.15.0/24")
    lab = BurstLab(lab_dir, spec)
    try:
        yield CrashLab(lab.start())
    finally:
        lab.stop()


def test_killed_before_slurm_is_told_tells_it_next_cycle(policy_lab: CrashLab) -> None:
    crash, lab = policy_lab, policy_lab.lab
    lab.cm_scale_once(check=True)  # holds the policy-mode nodes (drained~)
    jobs = [lab.sbatch("--wrap", "hostname") for _ in range(2)]
    crash.kill_inside("nodeaddr=")  # bound (BOOTING), Slurm not told
    booting = {n: r for n, r in crash.nodes().items() if r["state"] == "BOOTING"}
    assert len(booting) == 2, crash.nodes()
    addresses = {str(i["node"]): i["private_address"] for i in lab.instances()}
    assert sorted(addresses) == sorted(booting)
    for name in booting:
        fields = crash.slurm_node(name)
        asked = set(fields["State"].split("+")) & {"POWER_UP", "POWERING_UP"}
        assert asked, fields  # Slurm was asked to power it up before the launch
        assert fields.get("NodeAddr") != addresses[name], fields  # but not told the address
    launched = {i["instance_id"] for i in lab.instances()}
    dry = json.loads(_dry_run(lab))
    told = {row["target"] for row in dry if row["action"] == "verdict:tell-slurm"}
    assert told == set(booting), dry  # the dry run shows what the next cycle will do

    lab.cm_scale_once(check=True)  # the restarted daemon: one reconcile cycle
    assert_converged(crash)
    assert {i["instance_id"] for i in lab.instances()} == launched  # no second set paid for

    done = lambda: all(lab.job_field(j, "JobState") == "COMPLETED" for j in jobs)  # noqa: E731
    lab.run_until(done, timeout_s=180)
    assert {i["instance_id"] for i in lab.instances()} <= launched


def test_killed_before_the_hold_is_released_releases_it_next_cycle(policy_lab: CrashLab) -> None:
    crash, lab = policy_lab, policy_lab.lab
    lab.cm_scale_once(check=True)  # holds the policy-mode nodes (drained~)
    jobs = [lab.sbatch("--wrap", "hostname") for _ in range(2)]
    crash.kill_inside("state=UNDRAIN")  # bound, addresses told, the hold still on
    booting = sorted(n for n, r in crash.nodes().items() if r["state"] == "BOOTING")
    assert len(booting) == 2, crash.nodes()
    launched = {i["instance_id"] for i in lab.instances()}

    def registered_held(name: str) -> bool:
        flags = set(crash.slurm_node(name)["State"].split("+"))
        return {"IDLE", "DRAIN"} <= flags and not flags & {"POWERING_UP", "NOT_RESPONDING"}

    deadline = time.monotonic() + 120  # slurmd boots and registers while still held
    while not all(registered_held(n) for n in booting):
        assert time.monotonic() < deadline, [crash.slurm_node(n)["State"] for n in booting]
        time.sleep(1)
    for job in jobs:  # no job was placed on a held node
        assert (lab.job_field(job, "JobState"), lab.job_field(job, "Restarts")) == ("PENDING", "0")
    dry = json.loads(_dry_run(lab))
    told = {row["target"] for row in dry if row["action"] == "verdict:tell-slurm"}
    assert told == set(booting), dry  # the dry run shows what the next cycle will do

    lab.cm_scale_once(check=True)  # the restarted daemon: one reconcile cycle
    assert_converged(crash)
    for name in booting:
        assert "DRAIN" not in crash.slurm_node(name)["State"]
    done = lambda: all(lab.job_field(j, "JobState") == "COMPLETED" for j in jobs)  # noqa: E731
    lab.run_until(done, timeout_s=180)
    assert {i["instance_id"] for i in lab.instances()} <= launched  # no second set paid for
    assert [lab.job_field(j, "Restarts") for j in jobs] == ["0", "0"]

"""On-prem power end to end: a real slurmctld, an on-prem node `op1`
whose BMC is `ipmi_sim` and whose "machine" is a real slurmd, and the local provider's
burst nodes as the cloud. Driven by repeated `cm-scale --once`, as test_local_burst.py.

The machine: `PowerWatcher` follows the chassis power that ipmi_sim's chassis_control hook
keeps (tests/services/bmc.py). BOOT_S after the chassis goes on it starts op1's slurmd in a
time namespace whose boot clock says the kernel started a second ago: later than the
power-up request, as on real hardware (slurmctld ends POWERING_UP only for a boot later
than that request; a boot clock set further back once kept op1 POWERING_UP until its boot
timeout). It stops slurmd (SIGTERM, then SIGKILL, by pid) when the chassis goes off.
op1's slurmd runs in the host's network namespace on the bridge address, on a free port
(the burst nodes' slurmd run in their own namespaces on 6818). The lab has its own subnet,
so it can run beside the other end-to-end labs.

1. op1 is on at the start (switched on out of band, as a node kept on would be): cm-scale
   adopts it (UP), idle_timeout powers it off through Slurm's power saving and the BMC
   (graceful shutdown: the BMC sees a soft-off), Slurm shows it idle~.
2. Its BMC stopped with SIGSTOP (it takes requests, never answers): cm-scale lists op1 as
   unknown, never off, counts it as no capacity, and a job that may run in `gpu` or
   `cloud` bursts to a local cloud node instead.
3. The BMC back, a job for partition `gpu` (op1's) makes onprem_first power op1 on; the
   job runs on op1 after that one power-on.

Needs root, Slurm, munge and openipmi (`ipmi_sim`), like the other end-to-end tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cannot_run
from tests.e2e.conftest import slurm_user_for_hooks
from tests.labs.burstlab import BurstLab, BurstLabSpec
from tests.labs.slurmlab import free_port
from tests.services import bmc

NODE = "op1"
USER = "cmadmin"
PASSWORD = "Op1-Bmc-Pass-51c9"
SLURMD = "/usr/sbin/slurmd"
BOOT_S = 3.0  # chassis on to slurmd start: firmware and kernel, shortened


class PowerWatcher(threading.Thread):
    """The on-prem machine: its slurmd runs exactly while the BMC says the chassis is on."""

    def __init__(self, sim: bmc.IpmiSim, conf_server: str, workdir: Path) -> None:
        super().__init__(daemon=True)
        self.sim, self.conf_server, self.workdir = sim, conf_server, workdir
        self.process: subprocess.Popen[bytes] | None = None
        self.done = threading.Event()
        self.boots = 0

    def run(self) -> None:
        powered_on_at: float | None = None
        while not self.done.is_set():
            on = self.sim.power == "on"
            if on and powered_on_at is None:
                powered_on_at = time.monotonic()
            elif not on:
                powered_on_at = None
            booted = powered_on_at is not None and time.monotonic() - powered_on_at >= BOOT_S
            if booted and self.process is None:
                self.start_slurmd()
            elif not on and self.process is not None:
                self.stop_slurmd()
            self.done.wait(0.2)
        if self.process is not None:
            self.stop_slurmd()

    def start_slurmd(self) -> None:
        """slurmd of a machine whose kernel started about a second ago: after the chassis
        went on, so after the power-up request slurmctld compares the boot time with (a
        node that reports an earlier boot stays POWERING_UP until ResumeTimeout)."""
        uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
        argv = [
            "unshare",
            "--time",
            "--boottime",
            f"-{max(uptime - 1, 0)}",
            "--fork",
            "--kill-child",
            SLURMD,
            "-D",
            "-N",
            NODE,
            "--conf-server",
            self.conf_server,
        ]
        log = (self.workdir / f"slurmd-{NODE}-{self.boots}.out").open("wb")
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.boots += 1

    def stop_slurmd(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        # unshare --fork ignores SIGTERM while it waits: the signal goes to slurmd itself
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        for pid in children.read_text().split() if children.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)


def onprem_toml(sim: bmc.IpmiSim, secret_file: Path) -> str:
    entry = (
        f'{{ nodes = "{NODE}", address = "127.0.0.1", port = {sim.port}, instance_type = "lab" }}'
    )
    return f"""
[[providers]]
name = "rack1"
type = "ipmi"
region = "hall-a"
credentials = {{ source = "password_file", username = "{USER}", secret_file = "{secret_file}" }}
bmc_timeout_s = 2
soft_off_timeout_s = 10
hard_off_timeout_s = 10
polling_interval_s = 0.5
ipmi_cipher_suite = 3
bmc_nodes = [{entry}]

[[templates]]
name = "rack"
provider = "rack1"
partition = "gpu"
nodes = "{NODE}"
instance_types = ["lab"]
image = "-"
cpus = 2
memory_mb = 900
boot_timeout_s = 60
idle_kw = 1.5
"""


@pytest.fixture
def onprem_lab(lab_dir: Path) -> Iterator[tuple[BurstLab, bmc.IpmiSim, PowerWatcher]]:
    missing = bmc.ipmi_sim_missing()
    if missing:
        cannot_run(f"on-prem end-to-end test cannot run: {missing}")
    sim = bmc.start_ipmi_sim(lab_dir / "bmc-op1", USER, PASSWORD, os_shutdown_s=1.0)
    secret = lab_dir / "bmc.secret"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    lab: BurstLab | None = None
    watcher: PowerWatcher | None = None
    try:
        spec = BurstLabSpec(
            gpus=0,
            subnet="10.213.23.0/24",
            cluster="onprem",
            slurm_user=slurm_user_for_hooks(),
            policy_chain=[
                {"name": "onprem_first", "options": {"minutes": 15}},
                {"name": "queue_depth"},
                {"name": "idle_timeout", "options": {"minutes": 0.1, "margin_s": 0}},
            ],
            extra_toml=onprem_toml(sim, secret),
        )
        lab = BurstLab(lab_dir, spec)
        # op1 is an ordinary node (no State=CLOUD) in its own partition; its slurmd listens
        # on the bridge address. The address is known once the bridge exists: the lab's
        # provider settings name the subnet, whose first address is the head's.
        head = spec.subnet.rsplit(".", 1)[0] + ".1"
        spec.extra_conf = (
            f"NodeName={NODE} NodeAddr={head} Port={free_port()} CPUs=2 RealMemory=900 Weight=1",
            f"PartitionName=gpu Nodes={NODE} Default=NO MaxTime=INFINITE State=UP",
        )
        sim.press_power_button()  # on before clustermgr manages it
        lab.start()
        assert lab.lab is not None
        watcher = PowerWatcher(sim, lab.lab.conf_server, lab_dir)
        watcher.start()
        yield lab, sim, watcher
    finally:
        if watcher is not None:
            watcher.stop()
        if lab is not None:
            lab.stop()
        sim.resume()
        sim.stop()


def op1_state(lab: BurstLab) -> str:
    """op1's state as sinfo prints it (its partition is not the lab's)."""
    return lab.slurm("sinfo", "-N", "-h", "-o", "%T", "-n", NODE).strip()


def powered_down(lab: BurstLab) -> bool:
    """Powered down in Slurm (`idle~`, or `drained~` while policy mode holds it)."""
    return op1_state(lab) in ("idle~", "drained~")


def row(lab: BurstLab, name: str) -> dict[str, object]:
    rows = json.loads(lab.clustermgr("nodes", "list", "--json").stdout)
    return next(r for r in rows if r["name"] == name)


def test_onprem_node_powered_off_idle_on_for_a_job_and_a_dead_bmc_bursts_to_the_cloud(
    onprem_lab: tuple[BurstLab, bmc.IpmiSim, PowerWatcher],
) -> None:
    lab, sim, watcher = onprem_lab

    # 1. on at the start: adopted, then powered off after idling (graceful first)
    lab.run_until(lambda: row(lab, NODE)["state"] == "UP", timeout_s=120)
    lab.run_until(lambda: sim.power == "off" and powered_down(lab), timeout_s=240)
    assert "soft-off" in sim.events()
    assert row(lab, NODE)["power"] == "off"
    status = json.loads(lab.clustermgr("status", "--json", check=False).stdout)
    assert status["onprem_power"]["saved_kw"] == pytest.approx(1.5)

    # 2. its BMC stops answering (SIGSTOP: it takes requests, never answers): op1's power
    # is unknown, never off, it is no capacity, and a job that may run in `gpu` or
    # `cloud` bursts to a local cloud node instead of waiting for op1
    sim.hang()
    try:
        started = time.monotonic()
        instances = lab.clustermgr("providers", "instances", "rack1", "--json", check=False)
        assert time.monotonic() - started < 30
        assert json.loads(instances.stdout)[0]["state"] == "unknown"
        job = lab.sbatch("-p", "gpu,cloud", "--wrap", "hostname")
        lab.run_until(lambda: lab.job_field(job, "NodeList").startswith("cloud"), timeout_s=120)
        assert row(lab, NODE)["state"] == "POWERED_DOWN" and sim.power == "off"
    finally:
        sim.resume()

    # 3. with its BMC back, a job for op1's partition powers it on and runs there: the
    # first power-on serves the job (no boot timeout, no second power cycle)
    boots = watcher.boots
    job = lab.sbatch("-p", "gpu", "--wrap", "hostname")
    lab.run_until(lambda: lab.job_field(job, "JobState") == "COMPLETED", timeout_s=120)
    assert lab.job_field(job, "NodeList") == NODE
    assert watcher.boots == boots + 1
    assert "(Code:POWER)" not in lab.clustermgr("nodes", "history", NODE).stdout
    history = json.loads(lab.clustermgr("nodes", "history", NODE, "--json").stdout)
    states = [event["new_state"] for event in history]
    assert "STOPPING" in states and states.count("BOOTING") == 2

"""The crash campaign's labs (issue 9, item 2), one per cloud, each running the trials of
tests/labs/chaostrial.py.

aws, azure and openstack go through their real SDKs against the offline fakes
(tests/labs/cloudlab.py) with no boot agent: a burst of 200 instances cannot start 200
slurmd here, so cloud nodes are launched, bound and told to Slurm, and never register.
Their scale-down is Slurm's: the jobs are cancelled and Slurm powers the nodes down
(POWER_DOWN_FORCE; its SuspendProgram hook hands cm-scale a stop per node, the stop an idle
timeout would give). local's few instances are real slurmd in network namespaces
(burstlab.py): their jobs run and the idle-timeout policy stops them.

    with chaos_lab("azure", workdir, nodes=200) as lab:
        result = lab.trial(seed=7)
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clustermgr.core.hostlists import compress, expand
from clustermgr.providers.base import CloudInstance, Provider
from clustermgr.providers.local import LocalProvider, net
from clustermgr.providers.local import state as local_state
from clustermgr.providers.registry import make_provider
from tests.fakes.gate import Gate
from tests.labs import chaoscheck
from tests.labs.burstlab import BurstLab, BurstLabSpec
from tests.labs.chaostrial import (
    BURST,
    DOWN,
    Armed,
    Catch,
    ChaosLab,
    LabStuck,
    TrialResult,
)
from tests.labs.cloudlab import CLUSTER, CloudLab, LabOptions, cloud_lab
from tests.labs.slurmlab import SlurmLab

__all__ = ["CLOUDS", "ChaosLab", "LabStuck", "TrialResult", "chaos_lab"]

CLOUDS = ("aws", "azure", "openstack", "local")
# Slurm powers nodes up and down without its default rates (300 and 60 nodes a minute:
# a 200-node scale-down would take Slurm 200 s) and looks at them every second (10 s).
FAST_POWER_SAVE = (
    "ResumeRate=0",
    "SuspendRate=0",
    "SlurmctldParameters=enable_configless,power_save_interval=1,power_save_min_interval=0",
)


# --- the clouds, through their SDKs and fakes ------------------------------------------------


@dataclass(frozen=True)
class CloudRequests:
    """The fake's keys of one cloud's launch, binding and terminate requests, and whether
    there is one per node (so the trial picks which one is held)."""

    launch: str
    terminate: str
    binding: str | None = None
    per_node: bool = True


def cloud_requests(lab: CloudLab) -> CloudRequests:
    fake: Any = getattr(lab.harness, "fake")  # noqa: B009 - every harness holds its fake
    if lab.kind.name == "aws":
        return CloudRequests("CreateFleet", "TerminateInstances", "CreateTags", per_node=False)
    if lab.kind.name == "azure":
        sub = f"/subscriptions/{fake.subscription_id}"
        vms = f"{sub}/resourceGroups/{fake.resource_group}/providers/Microsoft.Compute"
        polls = f"GET {sub}/providers/Microsoft.Compute/locations/{fake.location}/operations/"
        return CloudRequests(f"PUT {vms}/virtualMachines/", f"DELETE {vms}/virtualMachines/", polls)
    return CloudRequests("POST /compute/v2.1/servers", "DELETE /compute/v2.1/servers/")


class CloudChaosLab(ChaosLab):
    settle_s = 120.0

    def __init__(self, lab: CloudLab, nodes: list[str]):
        super().__init__(lab.workdir, nodes)
        self.lab = lab
        self.name = lab.kind.name
        self.requests = cloud_requests(lab)
        self.provider: Provider = make_provider(lab.settings, CLUSTER)
        burst = ["timer", "wake", "launch-sent", "launch-done", "untold", "held", "failing"]
        if self.requests.binding is not None:
            burst.insert(4, "binding")
        self.points = {
            BURST: tuple(burst),
            DOWN: ("timer", "stopping", "terminate-sent", "terminate-done"),
        }
        self.per_node_s = {"aws": 0.02, "azure": 0.03, "openstack": 0.03}[self.name]

    @property
    def env(self) -> dict[str, str]:
        return self.lab.env

    @property
    def db_url(self) -> str:
        return self.lab.db_url

    @property
    def slurm(self) -> SlurmLab:
        assert self.lab.slurm is not None
        return self.lab.slurm

    @property
    def fake(self) -> Any:
        return getattr(self.lab.harness, "fake")  # noqa: B009

    def list_instances(self) -> dict[str, CloudInstance]:
        return self.provider.list_instances()

    def prepare(self) -> None:
        forget = getattr(self.fake, "forget_terminated", None)
        if forget is not None:  # moto keeps every terminated instance, and scans them all
            forget()

    def catch(self, point: str, rng: random.Random, phase: str) -> Catch:
        count = len(self.nodes)
        nth = rng.randint(1, count) if self.requests.per_node else 1
        if point == "timer":
            window = 2.0 + count * self.per_node_s
            return Catch(point, delay_s=rng.uniform(0.3, window))
        scontrol = {
            "wake": "state=POWER_UP",
            "untold": "nodeaddr=",
            "held": "state=UNDRAIN",
            "stopping": "state=POWER_DOWN ",
        }
        if point in scontrol:
            return Catch(point, scontrol=scontrol[point])
        if point == "failing":
            short = rng.randint(1, max(1, count // 10))
            return Catch(point, scontrol="state=POWER_DOWN_FORCE", short_by=short)
        if point == "binding":
            assert self.requests.binding is not None
            return Catch(point, gate=self.requests.binding, nth=rng.randint(1, count), after=True)
        key = self.requests.launch if point.startswith("launch") else self.requests.terminate
        return Catch(point, gate=key, nth=nth, after=point.endswith("-done"))

    def arm_cloud(self, catch: Catch) -> Armed:
        if catch.short_by:
            self.fake.limit_capacity(len(self.nodes) - catch.short_by)
            return Armed(lambda _elapsed: False, lambda: self.fake.limit_capacity(None))
        assert catch.gate is not None
        gate: Gate = self.fake.hold_next(catch.gate, nth=catch.nth, after=catch.after)
        return Armed(lambda _elapsed: gate.reached.is_set(), gate.release)

    def settled(self) -> bool:
        """The burst came to rest: every node is powered down or holds an instance Slurm
        knows at its address and no longer holds back (queue_depth may not relaunch a node
        that failed for capacity: the jobs left pending count the nodes still booting)."""
        rows = chaoscheck.read_rows(self.db_url)
        addresses = self.slurm_addresses()
        out = self.slurm.run("sinfo", "-N", "-h", "-o", "%N %T").stdout
        drained = {line.split()[0] for line in out.splitlines() if "drain" in line}
        working = [n for n in self.nodes if rows[n].state in chaoscheck.WORKING]
        resting = [n for n in self.nodes if rows[n].state == "POWERED_DOWN"]
        return len(working) + len(resting) == len(self.nodes) and all(
            rows[n].instance_id and addresses.get(n) == rows[n].private_address and n not in drained
            for n in working
        )

    def begin_scale_down(self) -> None:
        self.slurm.run("scancel", "--partition=gpu")
        self.slurm.run(
            "scontrol",
            "update",
            f"nodename={compress(self.nodes)}",
            "state=POWER_DOWN_FORCE",
            "reason=chaos: scale-down",
        )


class WholeChaosLab(CloudChaosLab):
    """The cloud lab with an all-or-nothing, per-launch-placement template and jobs of
    `job_nodes` nodes each (queue_depth launches each job as one all-or-nothing order):
    killed at every step of such a launch (before the create call, the create held before
    or after the cloud acted, between the binding calls, Azure: while releasing a short
    answer), the restarted cycle finding capacity free or scarce (room for less than a
    job). The check adds `partial`: a request with some but not all of its instances live."""

    def __init__(self, lab: CloudLab, nodes: list[str], job_nodes: int):
        super().__init__(lab, nodes)
        self.name = f"{lab.kind.name}-whole"
        self.job_nodes = job_nodes
        burst = ["wake", "launch-sent", "launch-done"]
        if self.requests.binding is not None:
            burst.append("binding")
        if lab.kind.name == "azure":  # a batch of VMs comes back short; EC2 and Nova start
            burst.append("releasing")  # all or none of one request, so nothing is released
        self.points = {**self.points, BURST: tuple(burst)}

    def demand(self) -> None:
        for _ in range(len(self.nodes) // self.job_nodes):
            self.slurm.run(
                "sbatch",
                "--parsable",
                f"--nodes={self.job_nodes}",
                f"--chdir={self.workdir}",
                f"--output={self.workdir}/job-%j.out",
                "--wrap",
                "hostname",
            )

    def catch(self, point: str, rng: random.Random, phase: str) -> Catch:
        if phase != BURST:
            found = super().catch(point, rng, phase)
            if found.gate is None or not self.requests.per_node:
                return found
            # a job that got none of its set at restart may still be pending: the n-th
            # terminate of those that hold an instance
            rows = chaoscheck.read_rows(self.db_url)
            holding = sum(1 for n in self.nodes if rows[n].instance_id)
            return replace(found, nth=rng.randint(1, max(1, holding)))
        scarce = rng.random() < 0.5
        jobs = len(self.nodes) // self.job_nodes
        if point == "releasing":  # the last job short by one; its release held
            short = Catch(point, gate=self.requests.terminate, short_by=1)
            return replace(short, scarce_at_restart=scarce)
        if point == "launch-sent" and self.lab.kind.name == "openstack":  # one POST a job
            return Catch(point, gate=self.requests.launch, nth=rng.randint(1, jobs),
                         scarce_at_restart=scarce)  # fmt: skip
        return replace(super().catch(point, rng, phase), scarce_at_restart=scarce)

    def arm_cloud(self, catch: Catch) -> Armed:
        if catch.point != "releasing":
            return super().arm_cloud(catch)
        assert catch.gate is not None
        self.fake.limit_capacity(len(self.nodes) - catch.short_by)
        # the 1st DELETE discards the VM that found no capacity; the 2nd is the release's
        gate: Gate = self.fake.hold_next(catch.gate, nth=2, after=False)

        def disarm() -> None:
            gate.release()
            self.fake.limit_capacity(None)

        return Armed(lambda _elapsed: gate.reached.is_set(), disarm)

    def restart_capacity(self, scarce: bool) -> Callable[[], None]:
        if not scarce:
            return lambda: None
        self.fake.limit_capacity(self.job_nodes - 1)
        return lambda: self.fake.limit_capacity(None)


# --- local: real slurmd in namespaces ---------------------------------------------------------


class LocalChaosLab(ChaosLab):
    name = "local"
    points = {
        BURST: ("timer", "wake", "namespace", "untold", "held", "failing"),
        DOWN: ("timer", "stopping", "terminate-sent"),
    }
    per_node_s = 1.0
    settle_s = 180.0
    idle_minutes = 0.15

    def __init__(self, lab: BurstLab):
        super().__init__(lab.workdir, expand(lab.spec.nodes))
        self.lab = lab
        self.state_dir = lab.state_dir / "local"
        self.provider = LocalProvider(lab.provider_settings(), lab.spec.cluster)
        self.subnet = net.Subnet.parse(lab.spec.subnet)

    @property
    def env(self) -> dict[str, str]:
        return self.lab.env

    @property
    def db_url(self) -> str:
        return self.lab.db_url

    @property
    def slurm(self) -> SlurmLab:
        assert self.lab.lab is not None
        return self.lab.lab

    def list_instances(self) -> dict[str, CloudInstance]:
        return self.provider.list_instances()

    def stray_namespaces(self) -> list[str]:
        """`cm-lc-*` namespaces on the lab's bridge that no record of its state dir names."""
        with local_state.locked(self.state_dir, exclusive=False) as state:
            known = set(state.instances)
        return [
            iid
            for iid in net.namespaced_instances()
            if iid not in known and net.on_bridge(iid, self.subnet)
        ]

    def catch(self, point: str, rng: random.Random, phase: str) -> Catch:
        count = len(self.nodes)
        if point == "timer":
            window = 4.0 + count * self.per_node_s if phase == BURST else 60 * self.idle_minutes
            return Catch(point, delay_s=rng.uniform(0.3, window + 4.0))
        if point == "failing":
            short = rng.randint(1, max(1, count // 2))
            return Catch(point, scontrol="state=POWER_DOWN_FORCE", short_by=short)
        if point == "namespace":
            return Catch(point, stall="launch")
        if point == "terminate-sent":
            return Catch(point, stall="terminate")
        scontrol = {
            "wake": "state=POWER_UP",
            "untold": "nodeaddr=",
            "held": "state=UNDRAIN",
            "stopping": "state=POWER_DOWN ",
        }
        return Catch(point, scontrol=scontrol[point])

    def arm_cloud(self, catch: Catch) -> Armed:
        if catch.short_by:
            local_state.limit_capacity(self.state_dir, len(self.nodes) - catch.short_by)
            return Armed(lambda _elapsed: False, lambda: local_state.clear_faults(self.state_dir))
        assert catch.stall is not None
        local_state.inject_stall(self.state_dir, catch.stall, seconds=300)
        status = "starting" if catch.stall == "launch" else "stopping"

        def stalled(_elapsed: float) -> bool:
            return status in self.record_statuses()

        return Armed(stalled, lambda: local_state.clear_faults(self.state_dir))

    def record_statuses(self) -> list[str]:
        """As another process reads instances.json (replaced whole, so no lock needed:
        the stalled launch holds it)."""
        path = self.state_dir / local_state.INSTANCES_FILE
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text())
            return [str(r.get("status")) for r in data.get("instances", [])]
        return []

    def settled(self) -> bool:
        """Every job ran; no node is still on its way up."""
        out = self.slurm.run("squeue", "-h", "-o", "%i").stdout
        rows = chaoscheck.read_rows(self.db_url)
        coming = ("REQUESTED", "LAUNCHING", "BOOTING")
        return not out.strip() and not any(rows[n].state in coming for n in self.nodes)


# --- making labs -------------------------------------------------------------------------------


def cloud_options(cloud: str, nodes: str, bin_dir: Path) -> LabOptions:
    """No boot agent, cm-scale through the wrapped scontrol, one-second cycles, orphans
    swept at once, no boot timeout within a trial (nodes never register), fakes that page
    100 items (the default of 2 tests paging; 100 pages a listing would slow each cycle)."""
    return LabOptions(
        nodes=nodes,
        boot=False,
        slurm_bin_dir=bin_dir,
        interval_s=1,
        orphan_grace_s=0,
        boot_timeout_s=240,  # never reached in a trial; under the lab's ResumeTimeout (300 s)
        policy_chain=({"name": "queue_depth"},),
        fake={} if cloud == "aws" else {"page_size": 100},
        daemon={"metrics_port": 0, "reconcile_interval_s": 600},
        suspend_timeout_s=2,
        slurm_conf=FAST_POWER_SAVE,
    )


@contextlib.contextmanager
def chaos_lab(cloud: str, workdir: Path, nodes: int, job_nodes: int = 0) -> Iterator[ChaosLab]:
    """A lab for `cloud` ("aws", "azure", "openstack" or "local") with `nodes` burst nodes,
    everything it started stopped on exit. `job_nodes` (clouds only): jobs of that many
    nodes on an all-or-nothing template (WholeChaosLab), else an array of one-node tasks."""
    workdir.mkdir(parents=True, exist_ok=True)
    if cloud == "local":
        with _local(workdir, nodes) as lab:
            yield lab
        return
    names = f"burst-[1-{nodes}]"
    bin_dir = ChaosLab(workdir, []).make_bin_dir()
    options = cloud_options(cloud, names, bin_dir)
    if job_nodes:
        whole = {"scaling_strategy": "all-or-nothing", "placement": "per-launch"}
        options = replace(options, templates=(whole,))
    with cloud_lab(workdir, cloud, options) as lab:
        made = WholeChaosLab(lab, expand(names), job_nodes) if job_nodes else None
        chaos = made or CloudChaosLab(lab, expand(names))
        first, failed = chaos.once()  # holds the policy-mode nodes (drained~)
        if failed:
            raise LabStuck(f"{cloud}: the first cycle failed: {first}")
        yield chaos


@contextlib.contextmanager
def _local(workdir: Path, nodes: int) -> Iterator[LocalChaosLab]:
    bin_dir = ChaosLab(workdir, []).make_bin_dir()
    spec = BurstLabSpec(
        nodes=f"cloud[1-{nodes}]",
        demand_mode="policy",
        subnet="10.213.16.0/24",
        cluster="chaos",
        interval_s=1,
        orphan_grace_s=0,
        slurm_bin_dir=str(bin_dir),
        extra_conf=FAST_POWER_SAVE,
        policy_chain=[
            {"name": "queue_depth"},
            {
                "name": "idle_timeout",
                "options": {"minutes": LocalChaosLab.idle_minutes, "margin_s": 0},
            },
        ],
    )
    lab = BurstLab(workdir, spec)
    try:
        yield LocalChaosLab(lab.start())
    finally:
        lab.stop()

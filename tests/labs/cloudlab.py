"""A burst lab for each real cloud SDK: a real slurmctld, cm-scale (the daemon) driving the
aws, azure or openstack provider against its offline fake, and instances that really boot.

The fakes only keep records; a `BootAgent` plays the machine behind each record: for every
running instance tagged with a node name it starts a real slurmd in a network namespace at
the address the fake gave the instance (on a bridge for the fake's network), and when the
instance is terminated it powers that slurmd off. So a burst through any of the three clouds
is the whole path: launch, registration, the job, idle scale-down, termination.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import CloudInstance, InstanceState, Provider
from clustermgr.providers.local import net
from clustermgr.providers.registry import make_provider
from tests.fakes import aws_harness, azure_harness, openstack_harness
from tests.fakes.azure_fake import MARKETPLACE_IMAGE
from tests.fakes.harness import ContractHarness
from tests.labs.procgroup import stop_group
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

BIN = Path(sys.executable).parent
HOOKS = ("resume", "suspend", "resume-fail")
CLUSTER = "e2e"
PROVIDER = "cloud1"
NODES = "burst-[1-3]"


@dataclass(frozen=True)
class LabOptions:
    """What a lab may change from the e2e defaults (the crash campaign bursts 200 nodes
    that never register, catches cm-scale in a wrapped scontrol, sweeps orphans at once)."""

    nodes: str = NODES
    boot: bool = True  # a BootAgent boots a real slurmd behind every instance
    slurm_bin_dir: Path | None = None  # cm-scale's Slurm clients ([slurm] bin_dir)
    interval_s: float = 2
    orphan_grace_s: float = 30
    boot_timeout_s: float = 120
    policy_chain: tuple[dict[str, Any], ...] = (
        {"name": "queue_depth"},
        {"name": "idle_timeout", "options": {"minutes": 0.2, "margin_s": 0}},
    )
    fake: dict[str, Any] = field(default_factory=dict)  # options of the cloud's fake
    daemon: dict[str, Any] = field(default_factory=dict)  # more [daemon] keys
    provider: dict[str, Any] = field(default_factory=dict)  # more keys of the provider
    database: dict[str, Any] = field(default_factory=dict)  # [database] keys (url too)
    slurm: dict[str, Any] = field(default_factory=dict)  # more [slurm] keys
    suspend_timeout_s: int = 5  # Slurm's SuspendTimeout
    slurm_conf: tuple[str, ...] = ()  # more slurm.conf lines (a later key wins)
    # several templates (the odd queue's): each merged over the lab's one burst template,
    # with its own node groups and partitions in slurm.conf instead of the burst group's
    templates: tuple[dict[str, Any], ...] = ()
    groups: tuple[NodeGroup, ...] = ()
    partitions: tuple[Partition, ...] = ()


@dataclass(frozen=True)
class CloudKind:
    """What differs per cloud: its harness, the network its fake hands addresses from, and
    the launch fields its templates need."""

    name: str
    harness: Callable[..., contextlib.AbstractContextManager[Any]]  # (tmp_path, **fake options)
    network: str
    instance_types: tuple[str, ...]
    template: Callable[[Any], dict[str, Any]]
    provider: dict[str, Any] = field(default_factory=dict)
    # no capacity for the first instance type, as each cloud says it (an EC2 Fleet asks
    # for every type at once and reports the starved ones; the others try type by type)
    starve_first_type: Callable[[Any, str], None] = lambda h, _type: h.fail_next_launches(
        ErrorKind.CAPACITY, attempts=1
    )


CLOUDS = {
    "aws": CloudKind(
        "aws",
        aws_harness.contract_harness,
        "172.31.0.0/16",
        ("p4d.24xlarge", "p4de.24xlarge"),
        lambda h: {"image": aws_harness.IMAGE, "subnets": list(h.subnets()[:1])},
        starve_first_type=lambda h, first: h.fake.no_capacity_for([first]),
    ),
    "azure": CloudKind(
        "azure",
        azure_harness.contract_harness,
        "10.0.0.0/16",
        azure_harness.DEFAULT_TYPES,
        lambda h: {"image": MARKETPLACE_IMAGE, "subnets": [h.fake.vnet_subnet]},
    ),
    "openstack": CloudKind(
        "openstack",
        openstack_harness.contract_harness,
        "10.20.0.0/16",
        openstack_harness.DEFAULT_FLAVORS,
        lambda h: {
            "image": "ubuntu-24.04",
            "network": "burst-net",
            "security_groups": ["default"],
            "key_name": "burst-key",
        },
        {"polling_interval_s": 0.2},
    ),
}


def local_id(instance_id: str) -> str:
    """A short name for the instance's namespace and veth (interface names are <= 15)."""
    return "b" + hashlib.sha1(instance_id.encode()).hexdigest()[:8]  # noqa: S324


@dataclass
class BootAgent:
    """Boots a slurmd for every running instance of ours; powers it off when it is gone."""

    provider: Provider
    subnet: net.Subnet
    conf_server: str
    log_dir: Path
    booted: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # what it booted and powered off, and why
    addresses: dict[str, str] = field(default_factory=dict)  # booted instance -> its address
    _last_seen: dict[str, str] = field(default_factory=dict)
    paused: bool = False  # boots nothing while set (a machine slow to come up)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> BootAgent:
        self._thread = threading.Thread(target=self._loop, name="boot-agent", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self.step(self.provider.list_instances())
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def step(self, instances: dict[str, CloudInstance]) -> None:
        # a machine stops when its instance is gone or going, not when one listing shows it
        # half (a tag update in flight); it boots at an address two listings agree on (the
        # Azure provider gives each attempt at a VM a NIC of its own, with a new IP)
        gone = (InstanceState.STOPPING, InstanceState.TERMINATED, InstanceState.ERROR)
        for instance_id in list(self.booted):
            listed = instances.get(instance_id)
            if listed is None or listed.state in gone:
                why = "gone from the listing" if listed is None else listed.state.value
                self._power_off(instance_id, why)
            elif listed.private_address and listed.private_address != self.addresses[instance_id]:
                self._power_off(instance_id, f"address now {listed.private_address}")
        seen = {}
        for instance in instances.values():
            if self.paused:
                break
            if (
                instance.instance_id not in self.booted
                and instance.state in (InstanceState.PENDING, InstanceState.RUNNING)
                and instance.node_name
                and instance.private_address
            ):
                seen[instance.instance_id] = instance.private_address
                if self._last_seen.get(instance.instance_id) == instance.private_address:
                    self._boot(instance)
        self._last_seen = seen

    def _boot(self, instance: CloudInstance) -> None:
        assert instance.node_name and instance.private_address
        short = local_id(instance.instance_id)
        self.log.append(
            f"booted {instance.instance_id} ({instance.node_name}) at {instance.private_address}"
        )
        self.addresses[instance.instance_id] = instance.private_address
        net.create_network(short, self.subnet, instance.private_address)
        self.booted[instance.instance_id] = net.spawn_slurmd(
            short,
            instance.node_name,
            self.conf_server,
            net.tool("slurmd") or "/usr/sbin/slurmd",
            self.log_dir / f"slurmd.{instance.node_name}.{short}.log",
        )

    def _power_off(self, instance_id: str, why: str) -> None:
        self.log.append(f"powered off {instance_id}: {why}")
        short = local_id(instance_id)
        net.stop_instances({short: self.booted.pop(instance_id)})
        net.delete_network(short)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for instance_id in list(self.booted):
            with contextlib.suppress(Exception):
                self._power_off(instance_id, "lab stopped")


class CloudLab:
    """slurmctld + one cloud's fake + cm-scale's config for it; `daemon()` runs cm-scale."""

    def __init__(
        self,
        workdir: Path,
        kind: CloudKind,
        harness: ContractHarness,
        options: LabOptions | None = None,
    ):
        self.workdir = workdir
        self.kind = kind
        self.harness = harness
        self.options = options or LabOptions()
        self.subnet = net.Subnet.parse(kind.network)
        self.config_path = workdir / "clustermgr.toml"
        self.state_dir = workdir / "state"
        self.slurm: SlurmLab | None = None
        self.agent: BootAgent | None = None
        # billed by the second: the idle-timeout policy may stop an idle node at once
        # (by the hour, as OpenStack is by default, it keeps it to the end of the hour paid)
        self.settings: ProviderSettings = harness.settings(  # type: ignore[attr-defined]
            name=PROVIDER,
            billing_increment_s=1,
            billing_minimum_s=0,
            **kind.provider,
            **self.options.provider,
        )

    @property
    def env(self) -> dict[str, str]:
        assert self.slurm is not None
        return {**os.environ, **self.slurm.env, "CLUSTERMGR_CONFIG": str(self.config_path)}

    def start(self) -> CloudLab:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o755)  # noqa: S103 - SlurmUser runs the hooks from here
        head = net.ensure_bridge_for(self.subnet)
        hooks = {kind: self._hook_wrapper(kind) for kind in HOOKS}
        nodes = self.options.nodes
        burst = NodeGroup(
            nodes, cpus=2, memory_mb=1000, features=(PROVIDER, self.settings.region, "burst")
        )
        self.slurm = SlurmLab(
            self.workdir / "slurm",
            list(self.options.groups or [burst]),
            list(self.options.partitions or [Partition("gpu", nodes, default=True)]),
            controller_address=head,
            resume_program=hooks["resume"],
            suspend_program=hooks["suspend"],
            resume_fail_program=hooks["resume-fail"],
            suspend_time=3600,
            resume_timeout=300,
            suspend_timeout=self.options.suspend_timeout_s,
            extra_conf=self.options.slurm_conf,
        )
        self.slurm.start()
        self.write_config()
        for step in (("db", "upgrade"), ("nodes", "sync")):
            self.clustermgr(*step)
        if self.options.boot:
            agent_provider = make_provider(self.settings, CLUSTER)
            self.agent = BootAgent(
                agent_provider, self.subnet, self.slurm.conf_server, self.slurm.log_dir
            ).start()
        return self

    def _hook_wrapper(self, kind: str) -> str:
        path = self.workdir / f"hook-{kind}"
        program = BIN / f"clustermgr-slurm-{kind}"
        path.write_text(
            f"#!/bin/sh\nCLUSTERMGR_CONFIG='{self.config_path}' exec '{program}' \"$@\"\n"
        )
        path.chmod(0o755)
        return str(path)

    def write_config(self) -> None:
        assert self.slurm is not None
        provider = self.settings.model_dump(mode="json", exclude_unset=True)
        opts = self.options
        template = {
            "name": "burst",
            "provider": PROVIDER,
            "partition": "gpu",
            "nodes": opts.nodes,
            "instance_types": list(self.kind.instance_types),
            "cpus": 2,
            "memory_mb": 1000,
            "features": ["burst"],
            "demand_mode": "policy",
            "boot_timeout_s": opts.boot_timeout_s,
            **self.kind.template(self.harness),
        }
        config: dict[str, Any] = {
            "cluster": {"name": CLUSTER, "head_address": self.slurm.conf_server},
            "database": {"url": self.db_url, **opts.database},
            "providers": [provider],
            "templates": [{**template, **more} for more in opts.templates or [{}]],
            "policy": {"chain": [dict(link) for link in opts.policy_chain]},
            "daemon": {
                "interval_s": opts.interval_s,
                "state_dir": str(self.state_dir),
                "orphan_grace_s": opts.orphan_grace_s,
                "heartbeat_stale_s": 3600,
                "metrics_port": 0,  # labs run side by side (xdist): no fixed port
                **opts.daemon,
            },
        }
        if opts.slurm_bin_dir is not None:
            config["slurm"] = {"bin_dir": str(opts.slurm_bin_dir)}
        if opts.slurm:
            config["slurm"] = {**config.get("slurm", {}), **opts.slurm}
        self.config_path.write_text(tomli_w.dumps(config))

    @property
    def db_url(self) -> str:
        return str(self.options.database.get("url") or f"sqlite:///{self.workdir / 'cm.db'}")

    # --- commands ----------------------------------------------------------------------

    def clustermgr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(BIN / "clustermgr"), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"clustermgr {' '.join(args)}: {done.stderr}")
        return done

    @contextlib.contextmanager
    def daemon(
        self,
        config: Path | None = None,
        log_name: str = "cm-scale.log",
        extra_env: dict[str, str] | None = None,
    ) -> Iterator[subprocess.Popen[str]]:
        """cm-scale as systemd runs it, its output in `log_name` (default cm-scale.log);
        SIGTERM after. `config`: another configuration file (a second head node's);
        `extra_env`: more environment (libfaketime's, say)."""
        log = (self.workdir / log_name).open("a")
        env = self.env if config is None else {**self.env, "CLUSTERMGR_CONFIG": str(config)}
        env = {**env, **(extra_env or {})}
        process = subprocess.Popen(
            [str(BIN / "cm-scale")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            stop_group(process, 30)
            log.close()

    def submit(self, *args: str) -> str:
        assert self.slurm is not None
        return self.slurm.run(
            "sbatch",
            "--parsable",
            "-p",
            "gpu",
            f"--chdir={self.workdir}",
            f"--output={self.workdir}/job-%j.out",
            *args,
        ).stdout.strip()

    def job(self, job_id: str, name: str) -> str:
        assert self.slurm is not None
        out = self.slurm.run("scontrol", "show", "job", job_id, "-o", check=False).stdout
        return next((w.split("=", 1)[1] for w in out.split() if w.startswith(f"{name}=")), "")

    def instances(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = json.loads(
            self.clustermgr("providers", "instances", PROVIDER, "--json").stdout
        )
        return listed

    def wait(self, what: str, condition: Callable[[], object], timeout_s: float) -> None:
        start = time.monotonic()
        deadline = start + timeout_s
        while time.monotonic() < deadline:
            if condition():
                print(f"{what}: {time.monotonic() - start:.1f} s")  # in the report on failure
                return
            assert self.agent is None or not self.agent.errors, self.agent.errors
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.tail()}")

    def tail(self) -> str:
        parts = []
        if self.slurm is not None:
            parts.append(self.slurm.run("squeue", "-h", check=False).stdout)
            sinfo = ("sinfo", "-N", "-h", "-o", "%N %T %o %E")  # %o: NodeAddr
            parts.append(self.slurm.run(*sinfo, check=False).stdout)
            parts.append("slurmctld: " + self.slurm.log_tail(25))
            parts.append(self.slurm.controller_state())
        if self.agent is not None:
            parts.append("boot agent: " + "; ".join(self.agent.log + self.agent.errors))
        parts.append(self.clustermgr("nodes", "list", check=False).stdout)
        parts.append(self.clustermgr("providers", "instances", PROVIDER, check=False).stdout)
        dry = subprocess.run(
            [str(BIN / "cm-scale"), "--dry-run"], capture_output=True, text=True, env=self.env
        )
        parts.append(dry.stdout + dry.stderr)
        with contextlib.suppress(OSError):
            parts.append((self.workdir / "cm-scale.log").read_text()[-3000:])
        return "\n".join(parts)

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
        if self.slurm is not None:
            self.slurm.stop()
        net.remove_bridge_for(self.subnet)


@contextlib.contextmanager
def cloud_lab(
    workdir: Path, cloud: str | CloudKind, options: LabOptions | None = None
) -> Iterator[CloudLab]:
    """A lab on one of CLOUDS (by name), or on a cloud kind of the caller's (real Nova's)."""
    kind = CLOUDS[cloud] if isinstance(cloud, str) else cloud
    (workdir / "harness").mkdir()
    fake_options = options.fake if options is not None else {}
    with kind.harness(workdir / "harness", **fake_options) as harness:
        lab = CloudLab(workdir, kind, harness, options)
        try:
            yield lab.start()
        finally:
            lab.stop()

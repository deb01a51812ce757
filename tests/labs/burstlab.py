"""A complete bursting setup on this machine: a real slurmctld, the local provider's
network-namespace "cloud", a clustermgr config and database. Used by the demo, the
end-to-end tests and the benchmarks; everything it starts it stops, by pid.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustermgr.config import ProviderSettings
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

HOOKS = ("resume", "suspend", "resume-fail")


@dataclass
class BurstLabSpec:
    nodes: str = "cloud[1-4]"
    cpus: int = 2
    memory_mb: int = 900
    gpus: int = 2
    gpu_model: str = "fake"
    instance_type: str = "local.gpu2"
    image: str = "local"  # the template's image: a raw id, or an image definition's name
    partition: str = "cloud"
    demand_mode: str = "policy"
    slurm_user: str = "root"
    subnet: str = "10.213.7.0/24"
    cluster: str = "lab"
    policy_chain: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"name": "queue_depth"},
            {"name": "idle_timeout", "options": {"minutes": 0.25, "margin_s": 0}},
        ]
    )
    db_url: str | None = None
    interval_s: float = 5.0
    heartbeat_stale_s: float = 600.0
    boot_timeout_s: float = 90.0
    orphan_grace_s: float = 30.0
    slurm_bin_dir: str = "/usr/bin"  # cm-scale's Slurm clients (a crash test wraps scontrol)
    health_check: str | None = None  # HealthCheckProgram path, if any
    extra_conf: Sequence[str] = ()
    metrics_port: int = 0
    extra_toml: str = ""  # appended to the config: [[directors]], [ldap], [images] tables
    # `cm-scale --serve-munge-key` for the lab's life (cycles run with --once); False when
    # the test runs the cm-scale daemon, which serves the key itself
    serve_munge_key: bool = True
    # the [[providers]] entry's type and own keys (after its name and region); None: the
    # local provider on `subnet`, state in the lab's state dir (an outside provider that
    # runs the same instances names them by its own keys)
    provider_toml: str | None = None
    # more environment for every command and hook (PYTHONPATH to an installed package)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # the local provider's nfs_stand_in ("SERVER:/EXPORT" -> host path)
    nfs_stand_in: Mapping[str, str] = field(default_factory=dict)
    # slurmctld's launcher (SlurmLab's): a head in its own mount namespace
    controller_launcher: Sequence[str] = ()


class BurstLab:
    def __init__(self, workdir: Path, spec: BurstLabSpec | None = None):
        self.workdir = workdir
        self.spec = spec or BurstLabSpec()
        self.state_dir = workdir / "state"
        self.config_path = workdir / "clustermgr.toml"
        self.db_url = self.spec.db_url or f"sqlite:///{workdir / 'clustermgr.db'}"
        self.bin_dir = Path(sys.executable).parent
        self.lab: SlurmLab | None = None
        self.head_address = ""
        self.key_server: subprocess.Popen[bytes] | None = None

    # --- set-up ------------------------------------------------------------------------

    def start(self) -> BurstLab:
        from clustermgr.providers.local import ensure_bridge

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o755)  # noqa: S103 - SlurmUser runs the hooks from here
        self.head_address = ensure_bridge(self.provider_settings())
        hooks = {kind: self._hook_wrapper(kind) for kind in HOOKS}
        s = self.spec
        extra = list(s.extra_conf)
        if s.health_check:
            extra += [
                f"HealthCheckProgram={s.health_check}",
                "HealthCheckInterval=300",
                "HealthCheckNodeState=ANY",
            ]
        self.lab = SlurmLab(
            self.workdir / "slurm",
            [
                NodeGroup(
                    s.nodes,
                    cpus=s.cpus,
                    memory_mb=s.memory_mb,
                    gpus=s.gpus,
                    gpu_model=s.gpu_model if s.gpus else None,
                    cloud=True,
                    features=("local", "here", "local-gpu"),
                )
            ],
            [Partition(s.partition, s.nodes, default=True)],
            slurm_user=s.slurm_user,
            controller_address=self.head_address,
            resume_program=str(hooks["resume"]),
            suspend_program=str(hooks["suspend"]),
            resume_fail_program=str(hooks["resume-fail"]),
            suspend_time=3600,
            # what `clustermgr slurm conf` would set (boot + 2 cycles + a margin), or more
            resume_timeout=int(s.boot_timeout_s + 2 * s.interval_s + 120),
            suspend_timeout=5,
            extra_conf=extra,
            launcher=s.controller_launcher,
        )
        self.lab.start()
        self.write_config()
        self.clustermgr("db", "upgrade")
        self.clustermgr("nodes", "sync")
        self.cm_scale_once(check=True)  # spool, heartbeat, and the policy-mode hold
        if self.spec.serve_munge_key:
            self.start_key_server()
        return self

    def start_key_server(self) -> None:
        """`cm-scale --serve-munge-key`: what the daemon serves in a thread, for the cycles
        this lab runs with --once (the nodes' boot redeems its launch's token there)."""
        log = (self.workdir / "key-server.log").open("ab")
        self.key_server = subprocess.Popen(
            [str(self.bin_dir / "cm-scale"), "--serve-munge-key"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 30
        while b"munge key server on" not in self.key_server_log().encode():
            if self.key_server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the munge key server did not start: {self.key_server_log()}")
            time.sleep(0.1)

    def key_server_log(self) -> str:
        try:
            return (self.workdir / "key-server.log").read_text()
        except OSError:
            return ""

    def provider_settings(self) -> ProviderSettings:
        """The lab's local provider, as the config below declares it."""
        return ProviderSettings.model_validate(
            {
                "name": "local",
                "type": "local",
                "region": "here",
                "subnet": self.spec.subnet,
                "state_dir": self.local_state_dir,
            }
        )

    def _hook_wrapper(self, kind: str) -> Path:
        """slurmctld runs hooks with a bare environment: a wrapper names our config."""
        path = self.workdir / f"hook-{kind}"
        program = self.bin_dir / f"clustermgr-slurm-{kind}"
        extra = "".join(f"{name}='{value}' " for name, value in self.spec.extra_env.items())
        path.write_text(
            f"#!/bin/sh\n{extra}CLUSTERMGR_CONFIG='{self.config_path}' exec '{program}' \"$@\"\n"
        )
        path.chmod(0o755)
        return path

    def write_config(self, **overrides: Any) -> None:
        assert self.lab is not None
        s = self.spec
        chain = json.dumps(overrides.get("policy_chain", s.policy_chain))
        text = f"""
[cluster]
name = "{s.cluster}"
head_address = "{self.head_address}:{self.lab.port}"

[database]
url = "{self.db_url}"

[slurm]
bin_dir = "{s.slurm_bin_dir}"
command_timeout_s = 30

[[providers]]
name = "local"
region = "here"
{s.provider_toml or self._local_provider_toml()}

[[templates]]
name = "local-gpu"
provider = "local"
partition = "{s.partition}"
nodes = "{s.nodes}"
instance_types = ["{s.instance_type}"]
image = "{s.image}"
cpus = {s.cpus}
memory_mb = {s.memory_mb}
{f'gpu_model = "{s.gpu_model}"' if s.gpus else ""}
gpus = {s.gpus}
features = ["local-gpu"]
demand_mode = "{s.demand_mode}"
boot_timeout_s = {s.boot_timeout_s}
prices = {{ "{s.instance_type}" = {{ on_demand = 2.5 }} }}

[policy]
chain = {_toml_inline(json.loads(chain))}
timeout_s = 5

[daemon]
interval_s = {overrides.get("interval_s", s.interval_s)}
reconcile_interval_s = 30
state_dir = "{self.state_dir}"
orphan_grace_s = {s.orphan_grace_s}
heartbeat_stale_s = {s.heartbeat_stale_s}
metrics_port = {s.metrics_port}
"""
        self.config_path.write_text(text + s.extra_toml)

    def _local_provider_toml(self) -> str:
        pairs = (f"{json.dumps(k)} = {json.dumps(v)}" for k, v in self.spec.nfs_stand_in.items())
        stand_ins = "{ " + ", ".join(pairs) + " }"
        return (
            f'type = "local"\nsubnet = "{self.spec.subnet}"\nstate_dir = "{self.local_state_dir}"'
            + (f"\nnfs_stand_in = {stand_ins}" if self.spec.nfs_stand_in else "")
        )

    @property
    def local_state_dir(self) -> Path:
        return self.state_dir / "local"

    # --- commands ------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        assert self.lab is not None
        config = {"CLUSTERMGR_CONFIG": str(self.config_path)}
        return {**os.environ, **self.lab.env, **self.spec.extra_env, **config}

    def clustermgr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run([str(self.bin_dir / "clustermgr"), *args], check)

    def cm_scale_once(self, check: bool = False) -> subprocess.CompletedProcess[str]:
        return self._run([str(self.bin_dir / "cm-scale"), "--once"], check)

    def _run(self, argv: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=self.env, timeout=300, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[-3:])} failed ({done.returncode}): {done.stderr}")
        return done

    def slurm(self, *args: str) -> str:
        assert self.lab is not None
        return self.lab.run(*args).stdout

    def sbatch(self, *args: str) -> str:
        """Submit from the lab's directory, output in it (never the caller's directory)."""
        out = self.slurm(
            "sbatch",
            "--parsable",
            "-p",
            self.spec.partition,
            f"--chdir={self.workdir}",
            f"--output={self.workdir}/job-%j.out",
            *args,
        )
        return out.strip().split(";")[0]

    def job_output(self, job_id: str) -> str:
        try:
            return (self.workdir / f"job-{job_id}.out").read_text()
        except OSError:
            return ""

    def job_field(self, job_id: str, name: str) -> str:
        assert self.lab is not None
        done = self.lab.run("scontrol", "show", "job", job_id, "-o", check=False)
        for word in done.stdout.split():
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
        return ""

    def node_states(self) -> dict[str, str]:
        out = self.slurm("sinfo", "-N", "-h", "-o", "%N %T", "-p", self.spec.partition)
        return dict(line.split() for line in out.splitlines() if line.strip())

    def instances(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = json.loads(
            self.clustermgr("providers", "instances", "local", "--json").stdout
        )
        return data

    def run_until(self, done: Any, timeout_s: float, pause_s: float = 2.0) -> int:
        """Repeat `cm-scale --once` until done() is true; returns the cycles used."""
        deadline = time.monotonic() + timeout_s
        cycles = 0
        while time.monotonic() < deadline:
            self.cm_scale_once()
            cycles += 1
            if done():
                return cycles
            time.sleep(pause_s)
        raise TimeoutError(
            f"not done after {cycles} cycles in {timeout_s:.0f} s\n{self.diagnosis()}"
        )

    def diagnosis(self) -> str:
        """What a person would look at first when a burst does not finish: the queue, the
        nodes as Slurm and as clustermgr see them, and the last cycle's output."""
        assert self.lab is not None
        parts = []
        for argv in (
            ["squeue", "-h", "-o", "%i %T %r %N"],
            ["sinfo", "-N", "-h", "-o", "%N %T %o %E"],
        ):
            parts.append(self.lab.run(*argv, check=False).stdout)
        parts.append(self.clustermgr("nodes", "list", check=False).stdout)
        process = self.lab._process
        if process is not None and process.poll() is not None:
            parts.append(f"slurmctld exited ({process.returncode})")
        parts.append("slurmctld log: " + self.lab.log_tail(40))
        parts.append("munge key server: " + self.key_server_log()[-2000:])
        last = self.cm_scale_once()
        parts.append(last.stdout[-2000:] + last.stderr[-3000:])
        return "\n".join(parts)

    # --- tear-down -----------------------------------------------------------------------

    def stop(self) -> None:
        """Terminate every local instance, stop slurmctld, remove the bridge."""
        from clustermgr.providers.local import LocalProvider, remove_bridge

        settings = self.provider_settings()
        provider = LocalProvider(settings, self.spec.cluster)
        try:
            ids = list(provider.list_instances())
            if ids:
                provider.terminate(ids, "lab-teardown")
        finally:
            if self.key_server is not None:
                self.key_server.terminate()
                try:
                    self.key_server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.key_server.kill()
                    self.key_server.wait()
                self.key_server = None
            if self.lab is not None:
                self.lab.stop()
            remove_bridge(settings)
            shutil.rmtree(self.state_dir / "spool", ignore_errors=True)


def _toml_inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_inline(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)

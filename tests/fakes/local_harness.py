"""The contract harness for "local": the real LocalProvider (via the registry) starting real
slurmd processes in network namespaces, registering with a real slurmctld (SlurmLab) whose
cloud nodes are n-[001-003].

The local provider's "credentials" are the right to use its state dir (and root): the bad
provider points at a state dir owned by another user (nobody), which it must refuse (AUTH).
Faults are injected through faults.json in the state dir (see providers/local/state.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import LaunchSpec, Provider
from clustermgr.providers.local import LocalProvider, ensure_bridge, remove_bridge
from clustermgr.providers.local import state as local_state
from clustermgr.providers.local.net import Subnet
from clustermgr.providers.registry import make_provider
from tests.conftest import cannot_run
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

CLUSTER = "contract"
SUBNET = "10.213.201.0/24"
NODES = "n-[001-003]"
NOBODY = 65534


def missing_requirement() -> str | None:
    """Why this machine cannot run local-provider tests, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for name in ("slurmctld", "slurmd", "munged", "ip", "unshare", "nsenter"):
        if shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            return f"{name} is not installed"
    return None


def skip_unless_possible() -> None:
    missing = missing_requirement()
    if missing:
        cannot_run(f"local provider tests cannot run: {missing}")


def settings_for(state_dir: Path, name: str = "local-test", **overrides: Any) -> ProviderSettings:
    data: dict[str, Any] = {
        "name": name,
        "type": "local",
        "region": "here",
        "subnet": SUBNET,
        "state_dir": str(state_dir),
        **overrides,
    }
    return ProviderSettings.model_validate(data)


@dataclass
class LocalHarness:
    lab: SlurmLab
    tmp_path: Path
    provider_type: str = "local"
    cluster: str = CLUSTER

    @property
    def state_dir(self) -> Path:
        return self.tmp_path / "local-state"

    def provider(self) -> Provider:
        return make_provider(settings_for(self.state_dir), self.cluster)

    def bad_credentials_provider(self) -> Provider:
        foreign = self.tmp_path / "someone-elses-state"
        foreign.mkdir(exist_ok=True)
        os.chown(foreign, NOBODY, NOBODY)
        return make_provider(settings_for(foreign, name="local-bad"), self.cluster)

    def spec(self, node_names: Sequence[str], instance_types: Sequence[str] = ()) -> LaunchSpec:
        return LaunchSpec(
            template="local-gpu",
            instance_types=tuple(instance_types) or ("local.gpu2",),
            image="local",
            node_names=tuple(node_names),
            user_data=f'#!/bin/sh\nexec /usr/sbin/slurmd -D -N "$NAME" '
            f"--conf-server '{self.lab.conf_server}'\n",
        )

    def unknown_instance_type(self) -> str:
        return "local.bogus99"

    def fail_next_launches(self, kind: ErrorKind, attempts: int = 1) -> None:
        local_state.inject_launch_fault(self.state_dir, kind, attempts)

    def limit_capacity(self, instances: int) -> None:
        local_state.limit_capacity(self.state_dir, instances)

    def secrets(self) -> Sequence[str]:
        return []  # the local provider has no secrets

    def cleanup(self) -> None:
        """Terminate every instance the state dir knows, whatever its cluster tag."""
        if not self.state_dir.exists():
            return
        for cluster in {CLUSTER, *_clusters_in(self.state_dir)}:
            provider = LocalProvider(settings_for(self.state_dir), cluster)
            with contextlib.suppress(ProviderError):
                ids = list(provider.list_instances())
                if ids:
                    provider.terminate(ids, "harness-teardown")


def _clusters_in(state_dir: Path) -> set[str]:
    with local_state.locked(state_dir, exclusive=False) as state:
        return {rec.cluster for rec in state.instances.values()}


@contextlib.contextmanager
def lab_on_bridge(
    workdir: Path,
    subnet: str = SUBNET,
    groups: Sequence[NodeGroup] | None = None,
    **lab_options: Any,
) -> Iterator[SlurmLab]:
    """A SlurmLab whose controller address is the local provider's bridge; the controller,
    munged and the bridge (each only if this started or made it) are gone on exit."""
    settings = settings_for(workdir / "unused-state", subnet=subnet)
    bridge = Path("/sys/class/net") / Subnet.parse(subnet).bridge
    made_bridge = not bridge.exists()
    host = ensure_bridge(settings)
    lab = SlurmLab(
        workdir,
        groups or [NodeGroup(NODES, gpus=2, gpu_model="fake", features=("local",))],
        [Partition("cloud", NODES, default=True)],
        controller_address=host,
        **lab_options,
    )
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()
        if made_bridge:
            remove_bridge(settings)


@contextlib.contextmanager
def contract_harness(tmp_path: Path) -> Iterator[LocalHarness]:
    skip_unless_possible()
    with lab_on_bridge(tmp_path / "slurm") as lab:
        harness = LocalHarness(lab, tmp_path)
        try:
            yield harness
        finally:
            harness.cleanup()

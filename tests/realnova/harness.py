"""The contract harness (tests/fakes/harness.py) against the real control plane: the
provider through the registry and a clouds.yaml, faults made the way a real cloud makes them
(fill the compute host with an admin's servers: NoValidHost; the project's instances quota
set to 0: Nova's quota refusal). On exit every server goes and the quotas are restored."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import LaunchSpec, Provider
from tests.fakes.openstack_harness import FAST, clouds_yaml_env, fast, settings_for
from tests.services.openstack import controlplane
from tests.services.openstack.controlplane import ControlPlane

CLUSTER = "contract"
GOOD_CLOUD = "realnova"
BAD_CLOUD = "realnova-wrong"
WRONG_PASSWORD = "wrong-pw-realnova-3b1e"
DEFAULT_FLAVORS = ("g1.small",)
HOST_VCPUS = 4  # SmallFakeDriver's 2 at cpu_allocation_ratio 2.0; g1.small takes one
KEY_NAME = "burst-key"
GONE_TIMEOUT_S = 60.0

# a real control plane answers in seconds, not milliseconds
TIMING = replace(FAST, poll_interval_s=0.3, active_timeout_s=90.0, backoff_cap_s=1.0)


@dataclass
class RealNovaHarness:
    plane: ControlPlane
    clouds_yaml: Path
    provider_type: str = "openstack"
    fillers: int = 0

    def settings(self, **overrides: Any) -> Any:
        return settings_for(GOOD_CLOUD, controlplane.REGION, **overrides)

    def provider(self, cluster: str = CLUSTER) -> Provider:
        from clustermgr.providers.registry import make_provider

        return fast(make_provider(self.settings(), cluster), TIMING)

    def bad_credentials_provider(self) -> Provider:
        from clustermgr.providers.registry import make_provider

        settings = settings_for(BAD_CLOUD, controlplane.REGION, name="openstack-bad")
        return fast(make_provider(settings, CLUSTER), TIMING)

    def spec(self, node_names: Sequence[str], instance_types: Sequence[str] = ()) -> LaunchSpec:
        return LaunchSpec(
            template="openstack-gpu",
            instance_types=tuple(instance_types) or DEFAULT_FLAVORS,
            image=controlplane.IMAGE,
            node_names=tuple(node_names),
            security_groups=("default",),
            user_data="#cloud-config\n",
            key_name=KEY_NAME,
            network=controlplane.NETWORK,
        )

    def unknown_instance_type(self) -> str:
        return "g9.bogus"

    def fail_next_launches(self, kind: ErrorKind, attempts: int = 1) -> None:
        """CAPACITY: no room left on the host; QUOTA: the project may run no instance.
        (Nova itself never throttles: THROTTLED is shown against the fake only.)"""
        if kind is ErrorKind.CAPACITY:
            self.limit_capacity(0)
        elif kind is ErrorKind.QUOTA:
            admin = self.plane.admin()
            project = admin.identity.find_project(controlplane.BURST_PROJECT)
            admin.set_compute_quotas(project.id, instances=0)
        else:
            raise ValueError(f"real Nova cannot be made to answer {kind.value}")

    def limit_capacity(self, instances: int) -> None:
        """Fill the host with an admin's g1.small servers until `instances` more fit."""
        admin = self.plane.admin()
        flavor = admin.compute.find_flavor("g1.small", ignore_missing=False)
        image = admin.image.find_image(controlplane.IMAGE, ignore_missing=False)
        wanted = HOST_VCPUS - instances - self.fillers
        for _ in range(wanted):
            self.fillers += 1
            server = admin.compute.create_server(
                name=f"filler-{self.fillers}",
                flavor_id=flavor.id,
                image_id=image.id,
                networks="none",
            )
            admin.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.5)

    def secrets(self) -> Sequence[str]:
        return [self.plane.burst_password, self.plane.admin_password, WRONG_PASSWORD]

    def clean(self) -> None:
        """Every server of every project gone, the burst project's quotas back to defaults."""
        admin = self.plane.admin()
        for server in admin.compute.servers(all_projects=True):
            admin.compute.delete_server(server, ignore_missing=True)
        deadline = time.monotonic() + GONE_TIMEOUT_S
        while list(admin.compute.servers(all_projects=True)):
            if time.monotonic() > deadline:
                raise TimeoutError("servers still there after the test")
            time.sleep(0.3)
        project = admin.identity.find_project(controlplane.BURST_PROJECT)
        admin.delete_compute_quotas(project.id)
        self.fillers = 0


def write_clouds_yaml(plane: ControlPlane, path: Path) -> Path:
    burst = controlplane.BURST_PROJECT
    clouds = {
        GOOD_CLOUD: plane.cloud(burst, burst, plane.burst_password),
        BAD_CLOUD: plane.cloud(burst, burst, WRONG_PASSWORD),
    }
    path.write_text(yaml.safe_dump({"clouds": clouds}))
    path.chmod(0o600)
    return path


def ensure_keypair(plane: ControlPlane, workdir: Path) -> None:
    """The burst user's key pair (Nova 2.92 on no longer makes keys: we bring one)."""
    import subprocess

    conn = plane.burst()
    if conn.compute.find_keypair(KEY_NAME) is not None:
        return
    key = workdir / "burst-key"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
            check=True,
            capture_output=True,
        )
    public = (workdir / "burst-key.pub").read_text().strip()
    conn.compute.create_keypair(name=KEY_NAME, public_key=public)


@contextlib.contextmanager
def contract_harness(plane: ControlPlane, tmp_path: Path) -> Iterator[RealNovaHarness]:
    ensure_keypair(plane, plane.workdir)
    path = write_clouds_yaml(plane, tmp_path / "clouds.yaml")
    made = RealNovaHarness(plane, path)
    with clouds_yaml_env(path):
        try:
            yield made
        finally:
            made.clean()

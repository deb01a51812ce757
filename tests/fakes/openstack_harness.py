"""The contract harness for "openstack": the real provider (via the registry) against
FakeOpenStack, through a clouds.yaml in tmp_path (OS_CLIENT_CONFIG_FILE, restored on exit)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import LaunchSpec, Provider
from clustermgr.providers.openstack.client import Timing
from clustermgr.providers.openstack.provider import OpenStackProvider
from clustermgr.providers.registry import make_provider
from tests.fakes.openstack_fake import FakeOpenStack

CLUSTER = "contract"
GOOD_CLOUD = "fakestack"
BAD_CLOUD = "fakestack-wrong"
WRONG_PASSWORD = "wrong-pw-7c6b5a4f3e2d"
DEFAULT_FLAVORS = ("g1.a100x8", "g1.a100x1")

# The provider waits and backs off in milliseconds against the fake.
FAST = Timing(
    poll_interval_s=0.01,
    active_timeout_s=10.0,
    throttle_attempts=3,
    backoff_base_s=0.01,
    backoff_cap_s=0.05,
)

# How each kind is signalled by OpenStack (see FakeOpenStack.fail_next_creates).
FAULT_KINDS = {
    ErrorKind.CAPACITY: "capacity",
    ErrorKind.QUOTA: "quota",
    ErrorKind.THROTTLED: "throttle",
}


def settings_for(
    cloud: str, region: str, name: str = "openstack-test", **overrides: Any
) -> ProviderSettings:
    data: dict[str, Any] = {
        "name": name,
        "type": "openstack",
        "region": region,
        "credentials": {"source": "clouds_yaml", "cloud": cloud},
        **overrides,
    }
    return ProviderSettings.model_validate(data)


def fast(provider: Provider, timing: Timing = FAST) -> Provider:
    assert isinstance(provider, OpenStackProvider)
    provider.timing = timing
    return provider


@dataclass
class OpenStackHarness:
    fake: FakeOpenStack
    tmp_path: Path
    clouds_yaml: Path
    provider_type: str = "openstack"
    cluster: str = CLUSTER

    def settings(self, **overrides: Any) -> ProviderSettings:
        return settings_for(GOOD_CLOUD, self.fake.region, **overrides)

    def provider(self) -> Provider:
        return fast(make_provider(self.settings(), self.cluster))

    def os_provider(self, **overrides: Any) -> OpenStackProvider:
        made = fast(make_provider(self.settings(**overrides), self.cluster))
        assert isinstance(made, OpenStackProvider)
        return made

    def bad_credentials_provider(self) -> Provider:
        settings = settings_for(BAD_CLOUD, self.fake.region, name="openstack-bad")
        return fast(make_provider(settings, self.cluster))

    def spec(self, node_names: Sequence[str], instance_types: Sequence[str] = ()) -> LaunchSpec:
        return LaunchSpec(
            template="openstack-gpu",
            instance_types=tuple(instance_types) or DEFAULT_FLAVORS,
            image="ubuntu-24.04",
            node_names=tuple(node_names),
            security_groups=("default",),
            user_data="#cloud-config\n",
            key_name="burst-key",
            network="burst-net",
        )

    def unknown_instance_type(self) -> str:
        return "g9.bogus"

    def fail_next_launches(self, kind: ErrorKind, attempts: int = 1) -> None:
        self.fake.fail_next_creates(FAULT_KINDS[kind], attempts=attempts)

    def limit_capacity(self, instances: int, instance_type: str | None = None) -> None:
        self.fake.limit_capacity(instances, instance_type)

    def secrets(self) -> Sequence[str]:
        return [self.fake.password, WRONG_PASSWORD]


@contextlib.contextmanager
def clouds_yaml_env(path: Path) -> Iterator[None]:
    """OS_CLIENT_CONFIG_FILE=path while inside; the previous value (or none) restored after."""
    before = os.environ.get("OS_CLIENT_CONFIG_FILE")
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OS_CLIENT_CONFIG_FILE", None)
        else:
            os.environ["OS_CLIENT_CONFIG_FILE"] = before


@contextlib.contextmanager
def contract_harness(tmp_path: Path, **fake_options: Any) -> Iterator[OpenStackHarness]:
    fake = FakeOpenStack(**fake_options).start()
    try:
        clouds = {GOOD_CLOUD: None, BAD_CLOUD: WRONG_PASSWORD}
        path = fake.write_clouds_yaml(tmp_path / "clouds.yaml", clouds)
        with clouds_yaml_env(path):
            yield OpenStackHarness(fake, tmp_path, path)
    finally:
        fake.stop()

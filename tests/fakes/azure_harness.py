"""The contract harness for "azure": the real provider (via the registry) against FakeAzure."""

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
from clustermgr.providers.registry import make_provider
from tests.fakes.azure_fake import MARKETPLACE_IMAGE, FakeAzure

CLUSTER = "contract"
DEFAULT_TYPES = ("Standard_NC24ads_A100_v4", "Standard_ND96asr_v4")
WRONG_SECRET = "wrong-secret-0f9e8d7c6b5a"

# How each kind is signalled by Azure (see FakeAzure.fail_next_vm_puts).
FAULT_CODES = {
    ErrorKind.CAPACITY: "WrappedAllocationFailed",  # ResourceOperationFailure around it
    ErrorKind.QUOTA: "OperationNotAllowed",
    ErrorKind.THROTTLED: "TooManyRequests",
}


def settings_for(
    fake: FakeAzure, secret_file: Path, name: str = "azure-test", **overrides: Any
) -> ProviderSettings:
    data: dict[str, Any] = {
        "name": name,
        "type": "azure",
        "region": fake.location,
        "endpoint_url": fake.url,
        "subscription_id": fake.subscription_id,
        "resource_group": fake.resource_group,
        "authority_host": fake.url,
        "disable_instance_discovery": True,
        "polling_interval_s": 0.01,
        "credentials": {
            "source": "client_secret_file",
            "tenant_id": fake.tenant_id,
            "client_id": fake.client_id,
            "secret_file": str(secret_file),
        },
        **overrides,
    }
    return ProviderSettings.model_validate(data)


@dataclass
class AzureHarness:
    fake: FakeAzure
    tmp_path: Path
    provider_type: str = "azure"
    cluster: str = CLUSTER

    def _secret_file(self, name: str, secret: str) -> Path:
        path = self.tmp_path / name
        path.write_text(secret + "\n")
        path.chmod(0o600)
        return path

    def settings(self, **overrides: Any) -> ProviderSettings:
        secret = self._secret_file("azure-client-secret", self.fake.client_secret)
        return settings_for(self.fake, secret, **overrides)

    def provider(self) -> Provider:
        return make_provider(self.settings(), self.cluster)

    def bad_credentials_provider(self) -> Provider:
        secret = self._secret_file("azure-wrong-secret", WRONG_SECRET)
        return make_provider(settings_for(self.fake, secret, name="azure-bad"), self.cluster)

    def spec(self, node_names: Sequence[str], instance_types: Sequence[str] = ()) -> LaunchSpec:
        return LaunchSpec(
            template="azure-gpu",
            instance_types=tuple(instance_types) or DEFAULT_TYPES,
            image=MARKETPLACE_IMAGE,
            node_names=tuple(node_names),
            subnets=(self.fake.vnet_subnet,),
            user_data="#cloud-config\n",
        )

    def unknown_instance_type(self) -> str:
        return "Standard_Bogus99_v9"

    def fail_next_launches(self, kind: ErrorKind, attempts: int = 1) -> None:
        self.fake.fail_next_vm_puts(FAULT_CODES[kind], attempts=attempts)

    def limit_capacity(self, instances: int, instance_type: str | None = None) -> None:
        self.fake.limit_capacity(instances, instance_type)

    def secrets(self) -> Sequence[str]:
        return [self.fake.client_secret, WRONG_SECRET]


@contextlib.contextmanager
def ca_bundle_env(path: str) -> Iterator[None]:
    """REQUESTS_CA_BUNDLE=path while inside; the previous value (or none) restored after."""
    before = os.environ.get("REQUESTS_CA_BUNDLE")
    os.environ["REQUESTS_CA_BUNDLE"] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("REQUESTS_CA_BUNDLE", None)
        else:
            os.environ["REQUESTS_CA_BUNDLE"] = before


@contextlib.contextmanager
def contract_harness(tmp_path: Path, **fake_options: Any) -> Iterator[AzureHarness]:
    fake = FakeAzure(**fake_options).start()
    try:
        with ca_bundle_env(fake.ca_bundle):
            yield AzureHarness(fake, tmp_path)
    finally:
        fake.stop()

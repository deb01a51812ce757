"""The contract harness for "aws": the real provider (via the registry) against FakeAws (moto).

Good credentials come from the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, set
here and restored on exit); the bad ones are a profile in a credentials file of this test
whose access key id the fake rejects.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import LaunchSpec, Provider
from clustermgr.providers.registry import make_provider
from tests.fakes.aws_fake import FakeAws

CLUSTER = "contract"
DEFAULT_TYPES = ("p4d.24xlarge", "g5.12xlarge")
ACCESS_KEY = "AKIACLUSTERMGRTEST01"
SECRET_KEY = "good-secret-1a2b3c4d5e6f7a8b9c0d"
BAD_ACCESS_KEY = "AKIACLUSTERMGRBAD001"
BAD_SECRET_KEY = "wrong-secret-0f9e8d7c6b5a4f3e2d1c"
BAD_PROFILE = "rejected"
IMAGE = "ami-dca37ea5"  # one of moto's built-in AMIs (a deep learning Ubuntu image)

# How each kind is signalled by EC2 (see FakeAws.fail_next_launches).
FAULT_CODES = {
    ErrorKind.CAPACITY: "InsufficientInstanceCapacity",
    ErrorKind.QUOTA: "VcpuLimitExceeded",
    ErrorKind.THROTTLED: "RequestLimitExceeded",
}
# Everything in the environment that could change which credentials or endpoint boto3 uses.
AWS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_EC2",
    "AWS_ENDPOINT_URL_STS",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_MAX_ATTEMPTS",
    "AWS_RETRY_MODE",
)


def fake_aws_env() -> dict[str, str]:
    """What a child process (cm-scale, clustermgr) needs to reach FakeAws with the good key."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextlib.contextmanager
def aws_env(values: dict[str, str]) -> Iterator[None]:
    """Set `values`, unset the other AWS_* variables above; restore all on exit."""
    before = {key: os.environ.get(key) for key in (*AWS_ENV, *values)}
    for key in AWS_ENV:
        os.environ.pop(key, None)
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def settings_for(fake: FakeAws, name: str = "aws-test", **overrides: Any) -> ProviderSettings:
    data: dict[str, Any] = {
        "name": name,
        "type": "aws",
        "region": fake.region,
        "endpoint_url": fake.url,
        "retry_mode": "standard",
        **overrides,
    }
    return ProviderSettings.model_validate(data)


@dataclass
class AwsHarness:
    fake: FakeAws
    tmp_path: Path
    provider_type: str = "aws"
    cluster: str = CLUSTER
    _subnets: tuple[str, ...] = field(default=(), init=False)

    def settings(self, **overrides: Any) -> ProviderSettings:
        return settings_for(self.fake, **overrides)

    def provider(self, **overrides: Any) -> Provider:
        return make_provider(self.settings(**overrides), self.cluster)

    def bad_credentials_provider(self) -> Provider:
        creds = {"source": "profile", "profile": BAD_PROFILE}
        return make_provider(settings_for(self.fake, "aws-bad", credentials=creds), self.cluster)

    def client(self) -> Any:
        """A bare boto3 EC2 client on the fake (the good credentials)."""
        return boto3.client("ec2", region_name=self.fake.region, endpoint_url=self.fake.url)

    def image(self) -> str:
        return IMAGE

    def subnets(self) -> tuple[str, ...]:
        if not self._subnets:
            found = self.client().describe_subnets()["Subnets"]
            ordered = sorted(found, key=lambda s: s["AvailabilityZone"])
            self._subnets = tuple(s["SubnetId"] for s in ordered[:2])
        return self._subnets

    def spec(self, node_names: Sequence[str], instance_types: Sequence[str] = ()) -> LaunchSpec:
        return LaunchSpec(
            template="aws-gpu",
            instance_types=tuple(instance_types) or DEFAULT_TYPES,
            image=self.image(),
            node_names=tuple(node_names),
            subnets=self.subnets(),
            user_data="#cloud-config\n",
        )

    def unknown_instance_type(self) -> str:
        return "p99.bogus"

    def fail_next_launches(self, kind: ErrorKind, attempts: int = 1) -> None:
        self.fake.fail_next_launches(FAULT_CODES[kind], attempts=attempts)

    def limit_capacity(self, instances: int, instance_type: str | None = None) -> None:
        self.fake.limit_capacity(instances, instance_type)

    def secrets(self) -> Sequence[str]:
        return [SECRET_KEY, BAD_SECRET_KEY]


def _write_aws_files(tmp_path: Path) -> dict[str, str]:
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        f"[{BAD_PROFILE}]\naws_access_key_id = {BAD_ACCESS_KEY}\n"
        f"aws_secret_access_key = {BAD_SECRET_KEY}\n"
    )
    credentials.chmod(0o600)
    config = tmp_path / "aws-config"
    config.write_text("")
    return {"AWS_SHARED_CREDENTIALS_FILE": str(credentials), "AWS_CONFIG_FILE": str(config)}


@contextlib.contextmanager
def contract_harness(tmp_path: Path) -> Iterator[AwsHarness]:
    fake = FakeAws().start()
    try:
        fake.reject_access_key(BAD_ACCESS_KEY)
        env = {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_EC2_METADATA_DISABLED": "true",
            **_write_aws_files(tmp_path),
        }
        with aws_env(env):
            yield AwsHarness(fake, tmp_path)
    finally:
        fake.stop()

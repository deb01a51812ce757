"""The aws provider type, as the configuration and the registry see it (no SDK import)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from clustermgr.config.options import ApiOptions
from clustermgr.core.kinds import ProviderKind


class AwsOptions(ApiOptions):
    """The keys only an aws [[providers]] entry takes."""

    launch_batch_size: int = Field(500, ge=1, le=500)  # instances per CreateFleet call
    terminate_batch_size: int = Field(1000, ge=1, le=1000)  # per TerminateInstances call
    retry_mode: Literal["standard", "adaptive"] = "adaptive"  # botocore's retry mode


def secret_files(settings: Any, environ: Mapping[str, str]) -> Iterator[tuple[Path, str]]:
    """The shared credentials file the chain and a profile read keys from."""
    if settings.credentials.source in ("chain", "profile"):
        shared = environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")
        yield Path(shared).expanduser(), f"provider {settings.name}'s AWS keys"


KIND = ProviderKind(
    type="aws",
    provider="clustermgr.providers.aws.provider:AwsProvider",
    credential_sources=("chain", "profile"),
    billing=(1, 60),
    capabilities=frozenset(
        {
            "spot",
            "placement",
            "per_launch_placement",
            "root_volume",
            "machine_image_copy",
            "object_store",
            "capacity_reservation",
            "capacity_block",
        }
    ),
    options=AwsOptions,
    sdk_loggers=("botocore", "boto3"),
    extra="aws",
    remote_api=True,
    secret_files=secret_files,
    image_id=(r"^(ami-[0-9A-Za-z]+|resolve:ssm:\S+)$", "ami-... or resolve:ssm:PARAMETER"),
)

"""The openstack provider type, as the configuration and the registry see it (no SDK
import)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from clustermgr.config.options import ApiOptions
from clustermgr.core.kinds import ProviderKind

CLOUDS_FILES = (Path("~/.config/openstack/clouds.yaml"), Path("/etc/openstack/clouds.yaml"))


def secret_files(settings: Any, environ: Mapping[str, str]) -> Iterator[tuple[Path, str]]:
    """The clouds.yaml that holds the password (OS_CLIENT_CONFIG_FILE, else the usual two)."""
    named = environ.get("OS_CLIENT_CONFIG_FILE")
    for path in (Path(named),) if named else CLOUDS_FILES:
        yield path.expanduser(), f"provider {settings.name}'s OpenStack password"


class OpenStackOptions(ApiOptions):
    """The keys only an openstack [[providers]] entry takes."""

    # between polls while a new server builds (BUILD -> ACTIVE); None: the client's 2 s
    polling_interval_s: float | None = Field(None, ge=0)


KIND = ProviderKind(
    type="openstack",
    provider="clustermgr.providers.openstack.provider:OpenStackProvider",
    credential_sources=("clouds_yaml",),
    billing=(3600, 3600),
    capabilities=frozenset(
        {"placement", "per_launch_placement", "placement_policy", "root_volume"}
    ),
    options=OpenStackOptions,
    sdk_loggers=("openstack", "keystoneauth"),
    extra="openstack",
    remote_api=True,
    secret_files=secret_files,
)

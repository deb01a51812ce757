"""The azure provider type, as the configuration and the registry see it (no SDK import)."""

from __future__ import annotations

from typing import Any

from clustermgr.kinds import ProviderKind


def check(settings: Any) -> None:
    """An azure provider names its subscription and resource group."""
    if not (settings.subscription_id and settings.resource_group):
        raise ValueError("azure providers need subscription_id and resource_group")


KIND = ProviderKind(
    type="azure",
    provider="clustermgr.providers.azure.provider:AzureProvider",
    credential_sources=("default", "client_secret_file", "client_secret_env"),
    billing=(60, 60),
    capabilities=frozenset({"spot", "placement", "root_volume"}),
    keys=frozenset(
        {"subscription_id", "resource_group", "authority_host", "disable_instance_discovery"}
    ),
    sdk_loggers=("azure",),
    extra="azure",
    remote_api=True,
    check=check,
)

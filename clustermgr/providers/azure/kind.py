"""The azure provider type, as the configuration and the registry see it (no SDK import)."""

from __future__ import annotations

from clustermgr.kinds import ProviderKind

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
)

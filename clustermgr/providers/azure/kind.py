"""The azure provider type, as the configuration and the registry see it (no SDK import)."""

from __future__ import annotations

from pydantic import Field

from clustermgr.config.options import ApiOptions
from clustermgr.core.kinds import ProviderKind


class AzureOptions(ApiOptions):
    """The keys only an azure [[providers]] entry takes."""

    subscription_id: str = Field(min_length=1)
    resource_group: str = Field(min_length=1)
    authority_host: str | None = None  # a sovereign cloud's (or a test's) AAD authority
    disable_instance_discovery: bool = False
    polling_interval_s: float = Field(5.0, ge=0)  # between polls of a long operation


KIND = ProviderKind(
    type="azure",
    provider="clustermgr.providers.azure.provider:AzureProvider",
    credential_sources=("default", "client_secret_file", "client_secret_env"),
    billing=(60, 60),
    capabilities=frozenset(
        {
            "spot",
            "placement",
            "per_launch_placement",
            "root_volume",
            "capacity_reservation_group",
            "machine_image_copy",
        }
    ),
    options=AzureOptions,
    sdk_loggers=("azure",),
    extra="azure",
    remote_api=True,
    image_id=(
        r"^([^:/\s]+:[^:/\s]+:[^:/\s]+:[^:/\s]+|/subscriptions/\S+)$",
        "publisher:offer:sku:version, a managed image id or a gallery image version id",
    ),
)

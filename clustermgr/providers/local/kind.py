"""The local provider type, as the configuration and the registry see it."""

from __future__ import annotations

from pathlib import Path

from clustermgr.config.base import StrictModel
from clustermgr.core.kinds import ProviderKind


class LocalOptions(StrictModel):
    """The keys only a local [[providers]] entry takes."""

    subnet: str = "10.213.0.0/24"  # the instances' addresses (the bridge holds the first)
    state_dir: Path | None = None  # its instance state file and logs; default under /var/lib


KIND = ProviderKind(
    type="local",
    provider="clustermgr.providers.local.provider:LocalProvider",
    credential_sources=("none",),
    billing=(1, 0),
    options=LocalOptions,
)

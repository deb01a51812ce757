"""The local provider type, as the configuration and the registry see it."""

from __future__ import annotations

from clustermgr.kinds import ProviderKind

KIND = ProviderKind(
    type="local",
    provider="clustermgr.providers.local.provider:LocalProvider",
    credential_sources=("none",),
    billing=(1, 0),
    keys=frozenset({"subnet", "state_dir"}),
)

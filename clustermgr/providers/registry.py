"""Find a provider class by type: built-ins first, then the `clustermgr.providers` entry points."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, cast

from clustermgr.errors import ConfigError

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings
    from clustermgr.providers.base import Provider, ProviderFactory

BUILTIN = {
    "aws": "clustermgr.providers.aws:AwsProvider",
    "azure": "clustermgr.providers.azure:AzureProvider",
    "openstack": "clustermgr.providers.openstack:OpenStackProvider",
    "local": "clustermgr.providers.local:LocalProvider",
    "ipmi": "clustermgr.providers.bmc.ipmi:IpmiProvider",
    "redfish": "clustermgr.providers.bmc.redfish:RedfishProvider",
}
EXTRA_FOR = {
    "aws": "aws",
    "azure": "azure",
    "openstack": "openstack",
    "ipmi": "onprem",
    "redfish": "onprem",
}


def provider_class(kind: str) -> ProviderFactory:
    target = BUILTIN.get(kind)
    if target is None:
        found = [ep for ep in entry_points(group="clustermgr.providers") if ep.name == kind]
        if not found:
            raise ConfigError(f"unknown provider type {kind!r}: not built in, no entry point")
        return cast("ProviderFactory", found[0].load())
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        extra = EXTRA_FOR.get(kind, kind)
        raise ConfigError(
            f"provider type {kind!r} needs the Python package {exc.name!r}: "
            f"pip install 'clustermgr[{extra}]'"
        ) from None
    return cast("ProviderFactory", getattr(module, attr))


def make_provider(settings: ProviderSettings, cluster: str) -> Provider:
    return provider_class(settings.type)(settings, cluster)

"""Find a provider class by type: the kind its package declares (clustermgr.core.kinds, read from
the `clustermgr.providers` entry points, built-in and outside alike), then its class,
imported only now."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from clustermgr.core.errors import ConfigError
from clustermgr.core.kinds import kind_of

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings
    from clustermgr.providers.base import Provider, ProviderFactory


def provider_class(type_name: str) -> ProviderFactory:
    kind = kind_of(type_name)
    module_name, _, attr = kind.provider.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        install = f"pip install 'clustermgr[{kind.extra}]'" if kind.extra else "install it"
        raise ConfigError(
            f"provider type {type_name!r} needs the Python package {exc.name!r}: {install}"
        ) from None
    found = getattr(module, attr, None)
    if found is None:
        raise ConfigError(f"provider type {type_name!r}: {kind.provider} does not exist")
    return cast("ProviderFactory", found)


def make_provider(settings: ProviderSettings, cluster: str) -> Provider:
    return provider_class(settings.type)(settings, cluster)

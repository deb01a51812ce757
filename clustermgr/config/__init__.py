"""Typed settings from /etc/clustermgr/clustermgr.toml (pydantic v2 at the edge, typed below).

Every table forbids unknown keys. Secrets never live here: a provider names where its
credentials come from (`credentials.source`), never the secret itself.

The package: base (the shared model, provider kinds), providers ([[providers]]: the keys
every type takes and the type's own options, validated by its kind; [[templates]]),
options (what the kinds' options models share), directors ([[directors]], [images],
[ldap]), sections (the smaller tables), settings (the whole file, the checks across
tables, loading).
"""

from __future__ import annotations

from clustermgr.config.base import NAME_PATTERN
from clustermgr.config.directors import (
    DirectorSettings,
    ImagesSettings,
    LdapSettings,
)
from clustermgr.config.providers import (
    Credentials,
    ProviderSettings,
    TemplateSettings,
    is_onprem,
)
from clustermgr.config.sections import PolicyRef, StagingRegionSettings, StagingSettings
from clustermgr.config.settings import Settings, load_settings, parse_settings, slurm_features

__all__ = [
    "NAME_PATTERN",
    "Credentials",
    "DirectorSettings",
    "ImagesSettings",
    "LdapSettings",
    "PolicyRef",
    "ProviderSettings",
    "Settings",
    "StagingRegionSettings",
    "StagingSettings",
    "TemplateSettings",
    "is_onprem",
    "load_settings",
    "parse_settings",
    "slurm_features",
]

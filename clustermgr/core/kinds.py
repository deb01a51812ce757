"""Provider kinds: what a provider package declares about itself, found by entry points.

A provider package (built in or outside clustermgr) declares one `ProviderKind` in a module
that imports no cloud SDK (`<package>/kind.py`) and names it in the `clustermgr.providers`
entry-point group of its distribution:

    [project.entry-points."clustermgr.providers"]
    mycloud = "mycloud_provider.kind:KIND"

Configuration (the `type` of a [[providers]] entry, its credential sources, the options
model of its own keys), the default billing rule, the secret files `config check` warns
about, the SDK loggers cm-scale quiets and the pip extra named when the SDK is missing are
all read from the kinds; nothing outside a provider's package lists the types. The provider
class itself is imported only when a provider is made (`providers/registry.py`), so reading
the kinds never imports a cloud SDK.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from clustermgr.core.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import BaseModel

GROUP = "clustermgr.providers"

# What a provider type can do beyond launch/list/terminate: a spot market, placement groups,
# a root volume size, a machine-image copy into its region, an object store.
Capability = Literal[
    "spot",
    "placement",
    "root_volume",
    "machine_image_copy",
    "object_store",
    "capacity_reservation",  # AWS On-Demand Capacity Reservations (a template's key)
    "capacity_block",  # AWS Capacity Blocks for ML (market 'capacity-block')
    "capacity_reservation_group",  # Azure capacity reservation groups
    "per_launch_placement",  # placement = "per-launch": a group made for each launch
    "placement_policy",  # a template's placement_policy (OpenStack server groups)
]

# (provider settings, the environment) -> (file, what secret it holds) for `config check`
SecretFiles = Callable[[Any, Mapping[str, str]], Iterable[tuple[Path, str]]]
# what a type needs across a [[providers]] entry's keys: ValueError (one line) when unmet
SettingsCheck = Callable[[Any], None]


@dataclass(frozen=True)
class ProviderKind:
    """One provider type, as its package declares it."""

    type: str  # the `type` of a [[providers]] entry
    provider: str  # "module:Class" of the provider class, imported only to make one
    # the credential sources it understands; the first is the one a config without
    # credentials.source gets
    credential_sources: tuple[str, ...]
    billing: tuple[int, int] = (1, 60)  # default (increment_s, minimum_s) of a run's bill
    capabilities: frozenset[Capability] = frozenset()
    # the pydantic model of the keys only this type takes: a [[providers]] entry's keys
    # beyond the common ones are validated by it and kept in ProviderSettings.options
    # (None: a type with no keys of its own). Frozen, like every settings model
    options: builtins.type[BaseModel] | None = None
    sdk_loggers: tuple[str, ...] = ()  # loggers cm-scale sets to WARNING (not --debug)
    extra: str | None = None  # `pip install 'clustermgr[extra]'` when its SDK is missing
    onprem: bool = False  # powers on-prem nodes through their BMCs (bmc_nodes)
    remote_api: bool = False  # its calls wait on a cloud's API (api_timeout_s applies)
    secret_files: SecretFiles | None = None
    check: SettingsCheck | None = None  # run after the common checks of ProviderSettings
    # what a template's raw machine-image id of this type looks like (a regular expression,
    # and the words `config check` says it with); None: any value may be one (a Glance
    # image name, a local instance type)
    image_id: tuple[str, str] | None = None

    @property
    def own_keys(self) -> frozenset[str]:
        """Every [[providers]] key only this type takes."""
        return frozenset() if self.options is None else frozenset(self.options.model_fields)

    @property
    def boots_images(self) -> bool:
        """A cloud that boots a machine image (an image definition's `base` may name it)."""
        return not self.onprem


@functools.cache
def kinds() -> Mapping[str, ProviderKind]:
    """Every provider kind installed, by type (the `clustermgr.providers` entry points)."""
    found: dict[str, ProviderKind] = {}
    for entry in entry_points(group=GROUP):
        try:
            kind = entry.load()
        except Exception as exc:  # an outside package: one line, not its traceback
            raise ConfigError(
                f"provider entry point {entry.name!r} ({entry.value}) failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(kind, ProviderKind) or kind.type != entry.name:
            raise ConfigError(
                f"provider entry point {entry.name!r} ({entry.value}) is not a ProviderKind "
                f"with type {entry.name!r}"
            )
        found.setdefault(kind.type, kind)
    return found


def kind_of(type_name: str) -> ProviderKind:
    found = kinds().get(type_name)
    if found is None:
        raise ConfigError(unknown_type(type_name))
    return found


def unknown_type(type_name: str) -> str:
    if not kinds():  # clustermgr's own entry points are missing: its metadata is stale
        return (
            f"unknown provider type {type_name!r}: no provider kind is installed (reinstall "
            f"clustermgr, `pip install -e .` in a checkout, to register its {GROUP!r} "
            "entry points)"
        )
    return (
        f"unknown provider type {type_name!r} (known: {', '.join(sorted(kinds()))}; another "
        f"comes from a package's {GROUP!r} entry point)"
    )


@functools.cache
def onprem_types() -> frozenset[str]:
    return frozenset(t for t, k in kinds().items() if k.onprem)


def image_types() -> tuple[str, ...]:
    """The types an image definition's `base` may name, in a stable order."""
    return tuple(sorted(t for t, k in kinds().items() if k.boots_images))


def sdk_loggers() -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for k in kinds().values() for name in k.sdk_loggers))


def offering(capability: Capability) -> list[str]:
    """The types that offer a capability, sorted (for messages)."""
    return sorted(t for t, k in kinds().items() if capability in k.capabilities)

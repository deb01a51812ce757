"""The whole configuration file: its tables, the checks across them, and loading it."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_validator

from clustermgr.config.base import StrictModel, first_error
from clustermgr.config.directors import DirectorSettings, ImagesSettings, LdapSettings
from clustermgr.config.fabric import check_fabric
from clustermgr.config.providers import ProviderSettings, TemplateSettings, is_onprem
from clustermgr.config.sections import (
    ClusterSettings,
    DaemonSettings,
    DatabaseSettings,
    PolicySettings,
    SimulateSettings,
    SlurmSettings,
    StagingSettings,
)
from clustermgr.core.errors import ConfigError
from clustermgr.core.hostlists import compress
from clustermgr.core.kinds import Capability, kind_of, offering


class Settings(StrictModel):
    cluster: ClusterSettings = ClusterSettings()
    database: DatabaseSettings = DatabaseSettings()
    slurm: SlurmSettings = SlurmSettings()
    providers: list[ProviderSettings] = []
    templates: list[TemplateSettings] = []
    directors: list[DirectorSettings] = []
    policy: PolicySettings = PolicySettings()
    daemon: DaemonSettings = DaemonSettings()
    simulate: SimulateSettings = SimulateSettings()
    ldap: LdapSettings | None = None  # LDAP replication to the directors; None: off
    images: ImagesSettings = ImagesSettings()
    staging: StagingSettings = StagingSettings()

    @model_validator(mode="after")
    def _cross_references(self) -> Settings:
        _unique("providers", [p.name for p in self.providers])
        _unique("templates", [t.name for t in self.templates])
        providers = {p.name: p for p in self.providers}
        owner: dict[str, str] = {}
        for template in self.templates:
            provider = providers.get(template.provider)
            if provider is None:
                known = ", ".join(providers) or "none defined"
                raise ValueError(
                    f"template {template.name!r}: provider {template.provider!r} is not defined "
                    f"(known: {known})"
                )
            _check_power_template(template, provider, self.slurm.onprem_partitions)
            _check_volume(f"template {template.name!r}", template.volume_size_gb, provider)
            check_fabric(template, provider)
            if template.market == "spot" and "spot" not in kind_of(provider.type).capabilities:
                raise ValueError(
                    f"template {template.name!r}: market 'spot' is not offered by "
                    f"{provider.type} provider {provider.name!r}"
                )
            _check_reservation(template, provider)
            for fallback in template.fallback_templates:
                if fallback not in {t.name for t in self.templates} or fallback == template.name:
                    raise ValueError(
                        f"template {template.name!r}: fallback_templates names {fallback!r}, "
                        "which is not another template"
                    )
            for node in template.node_names:
                if node in owner:
                    raise ValueError(
                        f"node {node!r} is in both templates {owner[node]!r} and {template.name!r}"
                    )
                owner[node] = template.name
        powered: dict[str, str] = {}
        for provider in self.providers:
            for node in provider.bmc_node_names:
                if node in powered:
                    raise ValueError(
                        f"node {node!r} is in bmc_nodes of both providers {powered[node]!r} "
                        f"and {provider.name!r}"
                    )
                powered[node] = provider.name
        _check_directors(self.directors, providers, self.templates)
        for region in self.staging.regions:
            if region.provider not in providers:
                raise ValueError(f"staging.regions: provider {region.provider!r} is not defined")
        for name in self.simulate.boot_delay_s:
            if name not in {t.name for t in self.templates}:
                raise ValueError(f"simulate.boot_delay_s names {name!r}, which is not a template")
        return self

    def provider(self, name: str) -> ProviderSettings:
        for provider in self.providers:
            if provider.name == name:
                return provider
        raise ConfigError(f"no provider named {name!r} in the configuration")

    def director(self, provider: str) -> DirectorSettings | None:
        """The director declared for a provider's region, if any."""
        return next((d for d in self.directors if d.provider == provider), None)

    def template(self, name: str) -> TemplateSettings:
        for template in self.templates:
            if template.name == name:
                return template
        raise ConfigError(f"no template named {name!r} in the configuration")


def _check_power_template(
    template: TemplateSettings, provider: ProviderSettings, onprem_partitions: Sequence[str]
) -> None:
    """An on-prem template's nodes are its provider's BMC-managed nodes; a cloud template
    has no idle power or nodes that stay on."""
    where = f"template {template.name!r}"
    if not is_onprem(provider):
        if template.min_on or template.idle_kw:
            raise ValueError(
                f"{where}: min_on and idle_kw are for on-prem templates (ipmi, redfish "
                f"providers); {provider.name!r} is a {provider.type} provider"
            )
        return
    managed = set(provider.bmc_node_names)
    outside = [n for n in template.node_names if n not in managed]
    if outside:
        raise ValueError(
            f"{where}: nodes {compress(outside)} are not in bmc_nodes of provider "
            f"{provider.name!r} (an on-prem template powers only the nodes its BMCs reach)"
        )
    classes = provider.powered.hardware_classes if provider.powered else frozenset()
    unknown = [t for t in template.instance_types if t not in classes]
    if unknown:
        raise ValueError(
            f"{where}: instance_types {unknown} are not hardware classes of provider "
            f"{provider.name!r} (bmc_nodes instance_type: {', '.join(sorted(classes))})"
        )
    if template.market == "spot":
        raise ValueError(f"{where}: market 'spot' is not offered by {provider.type} providers")
    if template.min_on > len(template.node_names):
        raise ValueError(
            f"{where}: min_on {template.min_on} exceeds the {len(template.node_names)} nodes "
            f"in nodes {template.nodes!r}"
        )
    if template.partition in onprem_partitions:
        raise ValueError(
            f"{where}: partition {template.partition!r} is in slurm.onprem_partitions, which "
            "are never powered down (SuspendExcParts): remove it there to power its nodes"
        )


def _check_reservation(template: TemplateSettings, provider: ProviderSettings) -> None:
    """Each reservation (and per-launch placement) key only where the provider's kind can
    launch into one."""
    capabilities = kind_of(provider.type).capabilities
    wanted: list[tuple[str, Capability]] = []
    if template.capacity_reservation is not None:
        wanted.append(("capacity_reservation", "capacity_reservation"))
    if template.capacity_reservation_group is not None:
        wanted.append(("capacity_reservation_group", "capacity_reservation_group"))
    if template.market == "capacity-block":
        wanted.append(("market 'capacity-block'", "capacity_block"))
    if template.placement == "per-launch":
        wanted.append(("placement 'per-launch'", "per_launch_placement"))
    if template.placement_policy is not None:
        wanted.append(("placement_policy", "placement_policy"))
    for key, capability in wanted:
        if capability not in capabilities:
            able = " and ".join(offering(capability)) or "no installed type"
            raise ValueError(
                f"template {template.name!r}: {key} is not offered by {provider.type} provider "
                f"{provider.name!r} (only {able} providers): remove it"
            )


def _check_volume(where: str, size_gb: int | None, provider: ProviderSettings) -> None:
    """A root volume size only where the provider's kind can size one."""
    if size_gb is not None and "root_volume" not in kind_of(provider.type).capabilities:
        able = offering("root_volume")
        only = f"{', '.join(able[:-1])} and {able[-1]}" if len(able) > 1 else "".join(able)
        raise ValueError(
            f"{where}: volume_size_gb is set, but {provider.type} provider {provider.name!r} "
            f"cannot size a root volume (only {only} can): remove it"
        )


def _check_directors(
    directors: list[DirectorSettings],
    providers: dict[str, ProviderSettings],
    templates: list[TemplateSettings],
) -> None:
    """A director per provider at most, for a cloud provider whose region has templates."""
    seen: set[str] = set()
    for index, director in enumerate(directors):
        where = f"directors[{index}:{director.provider}]"
        provider = providers.get(director.provider)
        if provider is None:
            known = ", ".join(providers) or "none defined"
            raise ValueError(
                f"{where}: provider {director.provider!r} is not defined (known: {known})"
            )
        if is_onprem(provider):
            raise ValueError(f"{where}: provider {provider.name!r} is on-prem; it has no director")
        _check_volume(where, director.volume_size_gb, provider)
        if director.region is not None and director.region != provider.region:
            raise ValueError(
                f"{where}: region {director.region!r} is not provider {provider.name!r}'s "
                f"region {provider.region!r} (a provider is one region; leave region out)"
            )
        if provider.name in seen:
            raise ValueError(f"{where}: a second director for provider {provider.name!r}")
        seen.add(provider.name)
        if not any(t.provider == provider.name for t in templates):
            raise ValueError(
                f"{where}: no template uses provider {provider.name!r}, so region "
                f"{provider.region!r} has no burst nodes to serve (add a template or remove it)"
            )


def _unique(table: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{table}: name {name!r} is used twice")
        seen.add(name)


_TOML_POSITION = re.compile(r"^(?P<msg>.*?) \(at line (?P<line>\d+), column (?P<col>\d+)\)$")


def load_settings(path: Path) -> Settings:
    """Read and validate one config file; every failure is a one-line ConfigError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such config file (pass --config PATH or set CLUSTERMGR_CONFIG)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        found = _TOML_POSITION.match(str(exc))
        if found:
            raise ConfigError(
                f"{path}:{found['line']}:{found['col']}: invalid TOML: {found['msg']}"
            ) from None
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return parse_settings(data, source=str(path))


def parse_settings(data: dict[str, Any], source: str = "<config>") -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        location = _dotted(exc.errors()[0]["loc"], data)
        message = first_error(
            exc, "unknown key (check the spelling against etc/clustermgr.toml.example)"
        )
        where = f"{source}: {location}: " if location else f"{source}: "
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{where}{message}{more}") from None


def _dotted(loc: tuple[int | str, ...], data: dict[str, Any]) -> str:
    """templates.1.cpus -> templates[1].cpus, with the item's name when it has one."""
    parts: list[str] = []
    node: Any = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict):
                name = node[item].get("name")
                if isinstance(name, str):
                    label = f"[{item}:{name}]"
            parts.append(label)
        else:
            parts.append(("." if parts else "") + item)
        try:
            node = node[item]
        except (KeyError, IndexError, TypeError):
            node = None
    return "".join(parts)


def slurm_features(extra: Sequence[str], provider: str, region: str, template: str) -> list[str]:
    """The Features= of a template's nodes: its own plus provider, region and template."""
    return list(dict.fromkeys([*extra, provider, region, template]))

"""[[providers]] and [[templates]]: where capacity comes from and what a node of it is."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    Field,
    SerializeAsAny,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from clustermgr.config.base import NAME_PATTERN, CredentialSource, StrictModel, slurm_name
from clustermgr.config.options import PoweredNodes
from clustermgr.config.reserved_capacity import CapacityReservation, Fallback, reservation_problem
from clustermgr.core.hostlists import HostlistError, expand
from clustermgr.core.inputs import slurm_hostlist_problem, slurm_word_problem
from clustermgr.core.kinds import kind_of, kinds, unknown_type
from clustermgr.core.pricing import BillingRule, Price

Fabric = Literal["efa", "infiniband", "sriov"]

OptionsT = TypeVar("OptionsT", bound=BaseModel)


class Credentials(StrictModel):
    source: CredentialSource = "chain"
    username: str | None = None  # a BMC's user (ipmi, redfish); never the password
    profile: str | None = None
    tenant_id: str | None = None
    client_id: str | None = None
    secret_file: Path | None = None
    secret_env: str | None = None
    cloud: str | None = None


class ProviderSettings(StrictModel):
    """A [[providers]] entry: the keys every type takes, and `options`, the keys only its
    type takes as its kind's options model validated them (clustermgr.core.kinds: a built-in's
    or an installed package's). In the file the type's own keys sit in the entry itself;
    code reads them with `options_as(Model)`."""

    name: str = Field(pattern=NAME_PATTERN)
    type: str
    region: str = Field(min_length=1)  # also every template's Slurm feature: a Slurm name
    credentials: Credentials = Credentials()
    endpoint_url: str | None = None
    max_instances: int | None = Field(None, ge=0)
    billing_increment_s: int | None = Field(None, gt=0)
    billing_minimum_s: int | None = Field(None, ge=0)
    # the type's own keys, validated by its kind's options model (never set in the file);
    # dumped with its own fields (the model's, not BaseModel's none)
    options: SerializeAsAny[BaseModel] | None = None

    @field_validator("type")
    @classmethod
    def _known_type(cls, type_name: str) -> str:
        if type_name not in kinds():
            raise ValueError(unknown_type(type_name))
        return type_name

    @field_validator("region")
    @classmethod
    def _region_is_a_slurm_name(cls, region: str) -> str:
        return slurm_name(region)

    @model_validator(mode="before")
    @classmethod
    def _keys_of_its_type(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            return data
        kind = kinds().get(data["type"])
        if kind is None:
            return data  # the type's own validator names it
        if "options" in data:
            raise ValueError(
                "key 'options' is not a [[providers]] key (give a type's own keys "
                "in the entry itself)"
            )
        for key in sorted(set(data) - COMMON_KEYS - kind.own_keys):
            owners = sorted(t for t, k in kinds().items() if key in k.own_keys)
            if owners:  # a key no type owns is an unknown key, named where it is
                raise ValueError(f"key {key!r} is only for {_either(owners)} providers")
        creds = data.get("credentials", {})
        if isinstance(creds, dict) and "source" not in creds:
            data = {**data, "credentials": {**creds, "source": kind.credential_sources[0]}}
        if kind.options is None:
            return data
        mine = {key: value for key, value in data.items() if key in kind.own_keys}
        rest = {key: value for key, value in data.items() if key not in mine}
        # a ValidationError here is located at the key itself: providers[0:NAME].KEY
        return {**rest, "options": kind.options.model_validate(mine)}

    @model_serializer(mode="wrap")
    def _as_in_the_file(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped as the file has it: the type's own keys in the entry itself (a dump
        validates back to the same settings)."""
        data: dict[str, Any] = handler(self)
        own = data.pop("options", None)
        return {**data, **own} if isinstance(own, dict) else data

    @model_validator(mode="after")
    def _credentials_fit_type(self) -> ProviderSettings:
        allowed = kind_of(self.type).credential_sources
        creds = self.credentials
        if creds.source not in allowed:
            raise ValueError(
                f"credentials.source {creds.source!r} does not fit a {self.type} provider "
                f"(use one of: {', '.join(sorted(allowed))})"
            )
        if creds.source == "profile" and not creds.profile:
            raise ValueError("credentials.source 'profile' needs credentials.profile")
        if creds.source == "client_secret_file" and not creds.secret_file:
            raise ValueError(
                "credentials.source 'client_secret_file' needs credentials.secret_file"
            )
        if creds.source == "client_secret_env" and not creds.secret_env:
            raise ValueError("credentials.source 'client_secret_env' needs credentials.secret_env")
        if creds.source.startswith("client_secret") and not (creds.tenant_id and creds.client_id):
            raise ValueError("azure client secrets need credentials.tenant_id and client_id")
        if creds.source == "clouds_yaml" and not creds.cloud:
            raise ValueError("credentials.source 'clouds_yaml' needs credentials.cloud")
        check = kind_of(self.type).check
        if check is not None:  # what its type needs across its keys
            check(self)
        return self

    def options_as(self, model: builtins.type[OptionsT]) -> OptionsT:
        """The type's own options, as its options model validated them."""
        if not isinstance(self.options, model):
            raise TypeError(f"provider {self.name!r} (type {self.type}) has no {model.__name__}")
        return self.options

    def option(self, key: str) -> Any:
        """One of its type's own keys, None when its type takes no such key (for code that
        reads one key across types: the watchdog's api_timeout_s)."""
        return getattr(self.options, key, None)

    @property
    def powered(self) -> PoweredNodes | None:
        """What an on-prem provider powers (its options); None for a cloud."""
        if kind_of(self.type).onprem and isinstance(self.options, PoweredNodes):
            return self.options
        return None

    @property
    def bmc_node_names(self) -> list[str]:
        """Every node an on-prem provider powers, in configuration order."""
        powered = self.powered
        return [] if powered is None else powered.node_names

    @property
    def billing(self) -> BillingRule:
        """The provider's billing rule: its kind's default unless the config overrides it."""
        increment, minimum = kind_of(self.type).billing
        return BillingRule(
            self.billing_increment_s or increment,
            minimum if self.billing_minimum_s is None else self.billing_minimum_s,
        )


# the keys every [[providers]] entry takes; the rest are its type's own (its options model)
COMMON_KEYS = frozenset(ProviderSettings.model_fields) - {"options"}


def _either(types: list[str]) -> str:
    return types[0] if len(types) == 1 else f"{', '.join(types[:-1])} and {types[-1]}"


class InstancePrice(StrictModel):
    on_demand: float = Field(ge=0)
    spot: float | None = Field(None, ge=0)


class TemplateSettings(StrictModel):
    name: str = Field(pattern=NAME_PATTERN)
    provider: str
    instance_types: list[str] = Field(min_length=1)
    image: str = Field(min_length=1)
    zones: list[str] = []
    subnets: list[str] = []
    security_groups: list[str] = []
    instance_profile: str | None = None
    placement_group: str | None = None
    # "per-launch": each launch of 2 or more nodes gets a compact placement group of its own,
    # made just before the launch and deleted once its nodes are gone (providers/launch_groups.py)
    placement: Literal["template", "per-launch"] = "template"
    # OpenStack's per-launch server group policy (default affinity)
    placement_policy: Literal["affinity", "soft-affinity"] | None = None
    key_name: str | None = None
    network: str | None = None
    volume_size_gb: int | None = Field(None, ge=1)  # root volume; None: the image's own size
    partition: str = Field(min_length=1)
    nodes: str = Field(min_length=1, description="Slurm hostlist of this template's node names")
    cpus: int = Field(ge=1)
    memory_mb: int = Field(ge=1)
    gpu_model: str | None = None
    gpus: int = Field(0, ge=0)
    max_nodes: int | None = Field(None, ge=0)
    market: Literal["on-demand", "spot", "capacity-block"] = "on-demand"
    max_spot_price: float | None = Field(None, gt=0)
    demand_mode: Literal["policy", "slurm"] = "policy"
    features: list[str] = []
    weight: int = Field(100, ge=0)
    boot_timeout_s: float = Field(600.0, gt=0)
    fallback_templates: list[str] = []
    prices: dict[str, InstancePrice] = {}
    # reserved capacity (config/reserved_capacity.py): AWS, Azure; what a launch it cannot hold does
    capacity_reservation: CapacityReservation | None = None
    capacity_reservation_group: str | None = Field(None, min_length=1)
    reservation_fallback: Fallback | None = None
    # on-prem templates (ipmi, redfish providers) only: an idle node's draw, for the kW saved
    # figure, and how many of the template's nodes always stay on (SuspendExcNodes)
    idle_kw: float = Field(0.0, ge=0)
    min_on: int = Field(0, ge=0)
    # the fabric (checked against the provider by config/fabric.py): aws `efa`, an EFA
    # interface; azure `infiniband`, RDMA sizes; openstack `vnic_type = "direct"`, SR-IOV
    efa: bool = False
    infiniband: bool = False
    vnic_type: Literal["normal", "direct"] = "normal"

    @field_validator("partition", "gpu_model")
    @classmethod
    def _slurm_name(cls, value: str | None) -> str | None:
        return None if value is None else slurm_name(value)

    @field_validator("features")
    @classmethod
    def _slurm_names(cls, features: list[str]) -> list[str]:
        return [slurm_name(feature) for feature in features]

    @model_validator(mode="after")
    def _check(self) -> TemplateSettings:
        problem = slurm_hostlist_problem(self.nodes)
        if problem:
            raise ValueError(f"nodes: {problem}")
        try:
            slots = expand(self.nodes)
        except HostlistError as exc:
            raise ValueError(f"nodes {self.nodes!r} is not a valid Slurm hostlist: {exc}") from None
        for name in slots:
            problem = slurm_word_problem(name)
            if problem:
                raise ValueError(f"nodes {self.nodes!r}: node name {problem}")
        if self.max_nodes is not None and self.max_nodes > len(slots):
            raise ValueError(
                f"max_nodes {self.max_nodes} exceeds the {len(slots)} names in nodes {self.nodes!r}"
            )
        problem = reservation_problem(
            self.market,
            self.capacity_reservation,
            self.capacity_reservation_group,
            self.reservation_fallback,
        )
        if problem:
            raise ValueError(problem)
        if self.placement == "per-launch" and self.placement_group:
            raise ValueError(
                "placement 'per-launch' makes a placement group for each launch: remove "
                "placement_group (or set placement = 'template' to use that one group)"
            )
        if self.placement_policy is not None and self.placement != "per-launch":
            raise ValueError(
                "placement_policy is for placement = 'per-launch' (the groups cm-scale makes)"
            )
        if self.gpus and not self.gpu_model:
            raise ValueError("gpus > 0 needs gpu_model (for example 'a100')")
        for itype in self.prices:
            if itype not in self.instance_types:
                raise ValueError(f"prices names {itype!r}, which is not in instance_types")
        return self

    @property
    def node_names(self) -> list[str]:
        return expand(self.nodes)

    @property
    def price_table(self) -> dict[str, Price]:
        """Hourly prices per instance type, as the one price type the cost code uses."""
        return {itype: Price(p.on_demand, p.spot) for itype, p in self.prices.items()}

    @property
    def fabric(self) -> Fabric | None:
        if self.efa:
            return "efa"
        if self.infiniband:
            return "infiniband"
        return "sriov" if self.vnic_type == "direct" else None

    @property
    def node_limit(self) -> int:
        return len(self.node_names) if self.max_nodes is None else self.max_nodes


def is_onprem(provider: ProviderSettings) -> bool:
    """A provider that powers on-prem nodes through their BMCs (ipmi, redfish)."""
    return kind_of(provider.type).onprem

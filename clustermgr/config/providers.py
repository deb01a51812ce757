"""[[providers]] and [[templates]]: where capacity comes from and what a node of it is."""

from __future__ import annotations

import builtins
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from clustermgr.config.base import (
    BMC_CREDENTIAL_SOURCES,
    NAME_PATTERN,
    CredentialSource,
    StrictModel,
    first_error,
    slurm_name,
)
from clustermgr.hostlists import HostlistError, expand
from clustermgr.inputs import slurm_hostlist_problem, slurm_word_problem
from clustermgr.kinds import ProviderKind, kind_of, kinds, unknown_type
from clustermgr.pricing import BillingRule, Price

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


def check_bmc_credentials(creds: Credentials, where: str) -> None:
    """A BMC password comes from a file or an environment variable, for a named user."""
    if creds.source not in BMC_CREDENTIAL_SOURCES:
        raise ValueError(f"{where}: credentials.source must be password_file or password_env")
    if not creds.username:
        raise ValueError(f"{where}: credentials.source {creds.source!r} needs credentials.username")


class BmcNodeSettings(StrictModel):
    """Nodes whose power one BMC entry controls (ipmi, redfish providers).

    `address` and `system` may hold `{node}`, replaced by each node's name, so one entry
    covers a hostlist: `nodes = "gpu-[001-064]"`, `address = "{node}-bmc.example.org"`.
    """

    nodes: str = Field(min_length=1, description="Slurm hostlist of the nodes")
    address: str = Field(min_length=1, description="BMC host name or IP address")
    port: int | None = Field(None, ge=1, le=65535)  # default: its type's (providers/bmc/kind.py)
    system: str | None = None  # redfish: the ComputerSystem id; default: the BMC's only one
    instance_type: str = Field("onprem", pattern=NAME_PATTERN)  # the hardware class label
    credentials: Credentials | None = None  # default: the provider's credentials

    @model_validator(mode="after")
    def _check(self) -> BmcNodeSettings:
        try:
            names = expand(self.nodes)
        except HostlistError as exc:
            raise ValueError(f"nodes {self.nodes!r} is not a valid Slurm hostlist: {exc}") from None
        for name in names:
            if not re.fullmatch(NAME_PATTERN, name):
                raise ValueError(f"nodes {self.nodes!r}: {name!r} is not a node name")
        if self.credentials is not None:
            check_bmc_credentials(self.credentials, f"bmc_nodes entry {self.nodes!r}")
        return self

    @property
    def node_names(self) -> list[str]:
        return expand(self.nodes)


class ProviderSettings(StrictModel):
    """A [[providers]] entry. `type` names a provider kind (clustermgr.kinds: a built-in or
    an installed package's); a kind with an options model has its own keys validated by it
    and kept in `options` (`options_as(Model)`); the built-ins' keys are fields here."""

    name: str = Field(pattern=NAME_PATTERN)
    type: str
    region: str = Field(min_length=1)  # also every template's Slurm feature: a Slurm name
    credentials: Credentials = Credentials()
    endpoint_url: str | None = None
    max_instances: int | None = Field(None, ge=0)
    billing_increment_s: int | None = Field(None, gt=0)
    billing_minimum_s: int | None = Field(None, ge=0)
    # aws, azure, openstack: one API call's wait for an answer (after the SDK's own
    # retries of throttling and 5xx, a call that times out is a TRANSIENT error)
    api_timeout_s: float = Field(60.0, gt=0, le=600)
    # aws
    launch_batch_size: int = Field(500, ge=1, le=500)
    terminate_batch_size: int = Field(1000, ge=1, le=1000)
    retry_mode: Literal["standard", "adaptive"] = "adaptive"
    # azure
    subscription_id: str | None = None
    resource_group: str | None = None
    authority_host: str | None = None
    disable_instance_discovery: bool = False
    polling_interval_s: float = Field(5.0, ge=0)
    # local
    subnet: str = "10.213.0.0/24"
    state_dir: Path | None = None
    # ipmi, redfish: on-prem nodes whose power a BMC controls
    bmc_nodes: list[BmcNodeSettings] = []
    bmc_timeout_s: float = Field(5.0, gt=0, le=120)  # one BMC call, then UNKNOWN / an error
    soft_off_timeout_s: float = Field(120.0, ge=0)  # graceful shutdown, then hard off; 0: hard
    hard_off_timeout_s: float = Field(30.0, gt=0)  # hard off until the BMC reports off
    # ipmi (ipmitool lanplus)
    ipmi_cipher_suite: int = Field(17, ge=1, le=17)
    ipmi_privilege: Literal["OPERATOR", "ADMINISTRATOR"] = "OPERATOR"
    # redfish
    redfish_scheme: Literal["https", "http"] = "https"
    tls_verify: bool = True
    tls_ca_file: Path | None = None
    # an outside kind's own keys, validated by its options model (never set in the file)
    options: BaseModel | None = None

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
        for other in kinds().values():
            for key in sorted((other.own_keys - kind.own_keys) & set(data)):
                owners = " and ".join(t for t, k in kinds().items() if key in k.own_keys)
                raise ValueError(f"key {key!r} is only for {owners} providers")
        creds = data.get("credentials", {})
        if isinstance(creds, dict) and "source" not in creds:
            data = {**data, "credentials": {**creds, "source": kind.credential_sources[0]}}
        if kind.options is not None:
            data = _own_options(kind, kind.options, data)
        return data

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

    @property
    def bmc_node_names(self) -> list[str]:
        """Every node an ipmi/redfish provider powers, in configuration order."""
        return [node for entry in self.bmc_nodes for node in entry.node_names]

    def options_as(self, model: builtins.type[OptionsT]) -> OptionsT:
        """The type's own options, as its options model validated them."""
        if not isinstance(self.options, model):
            raise TypeError(f"provider {self.name!r} (type {self.type}) has no {model.__name__}")
        return self.options

    @property
    def billing(self) -> BillingRule:
        """The provider's billing rule: its kind's default unless the config overrides it."""
        increment, minimum = kind_of(self.type).billing
        return BillingRule(
            self.billing_increment_s or increment,
            minimum if self.billing_minimum_s is None else self.billing_minimum_s,
        )


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
    market: Literal["on-demand", "spot"] = "on-demand"
    max_spot_price: float | None = Field(None, gt=0)
    demand_mode: Literal["policy", "slurm"] = "policy"
    features: list[str] = []
    weight: int = Field(100, ge=0)
    boot_timeout_s: float = Field(600.0, gt=0)
    fallback_templates: list[str] = []
    prices: dict[str, InstancePrice] = {}
    # on-prem templates (ipmi, redfish providers) only: an idle node's draw, for the kW saved
    # figure, and how many of the template's nodes always stay on (SuspendExcNodes)
    idle_kw: float = Field(0.0, ge=0)
    min_on: int = Field(0, ge=0)

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
    def node_limit(self) -> int:
        return len(self.node_names) if self.max_nodes is None else self.max_nodes


def is_onprem(provider: ProviderSettings) -> bool:
    """A provider that powers on-prem nodes through their BMCs (ipmi, redfish)."""
    return kind_of(provider.type).onprem


def _own_options(
    kind: ProviderKind, model: type[BaseModel], data: dict[str, Any]
) -> dict[str, Any]:
    """`data` with the kind's own keys replaced by `options`, validated by its model (the
    first problem as one line naming the key)."""
    mine = {key: value for key, value in data.items() if key in model.model_fields}
    try:
        options = model.model_validate(mine)
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"])
        raise ValueError(f"{kind.type} option {where}: {first_error(exc)}") from None
    rest = {key: value for key, value in data.items() if key not in mine}
    return {**rest, "options": options}

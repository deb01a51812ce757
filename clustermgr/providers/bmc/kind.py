"""The ipmi and redfish provider types, as the configuration and the registry see them (no
SDK import): their options (the nodes and their BMCs, the power-off timeouts, each
protocol's own keys), on-prem nodes, no cloud bill, and the checks across a BMC provider's
keys."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from clustermgr.config.base import NAME_PATTERN, StrictModel
from clustermgr.config.providers import Credentials
from clustermgr.core.hostlists import HostlistError, expand
from clustermgr.core.kinds import ProviderKind

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

# "none" on the provider: every bmc_nodes entry names its own credentials
BMC_CREDENTIALS = ("none", "password_file", "password_env")


def check_bmc_credentials(creds: Credentials, where: str) -> None:
    """A BMC password comes from a file or an environment variable, for a named user."""
    if creds.source not in BMC_CREDENTIALS[1:]:
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
    port: int | None = Field(None, ge=1, le=65535)  # default: its type's (default_port)
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


class BmcOptions(StrictModel):
    """The keys both BMC types take."""

    bmc_nodes: list[BmcNodeSettings] = []
    bmc_timeout_s: float = Field(5.0, gt=0, le=120)  # one BMC call, then UNKNOWN / an error
    soft_off_timeout_s: float = Field(120.0, ge=0)  # graceful shutdown, then hard off; 0: hard
    hard_off_timeout_s: float = Field(30.0, gt=0)  # hard off until the BMC reports off
    polling_interval_s: float = Field(5.0, ge=0)  # between power-state polls while waiting

    @property
    def node_names(self) -> list[str]:
        return [node for entry in self.bmc_nodes for node in entry.node_names]

    @property
    def hardware_classes(self) -> frozenset[str]:
        return frozenset(entry.instance_type for entry in self.bmc_nodes)

    @property
    def power_off_s(self) -> float:
        return self.soft_off_timeout_s + self.hard_off_timeout_s

    @property
    def default_port(self) -> int:
        """The BMC port of a bmc_nodes entry without one."""
        return 623


class IpmiOptions(BmcOptions):
    """An ipmi provider's keys: ipmitool lanplus."""

    ipmi_cipher_suite: int = Field(17, ge=1, le=17)
    ipmi_privilege: Literal["OPERATOR", "ADMINISTRATOR"] = "OPERATOR"


class RedfishOptions(BmcOptions):
    """A redfish provider's keys."""

    redfish_scheme: Literal["https", "http"] = "https"
    tls_verify: bool = True
    tls_ca_file: Path | None = None

    @property
    def default_port(self) -> int:
        return 443 if self.redfish_scheme == "https" else 80


def bmc_options(settings: ProviderSettings) -> BmcOptions:
    """An ipmi or redfish provider's own keys."""
    return settings.options_as(BmcOptions)


def check(settings: ProviderSettings) -> None:
    """Credentials, the node list and one BMC endpoint per node (ValueError: one line)."""
    options = bmc_options(settings)
    if settings.credentials.source != "none":
        check_bmc_credentials(settings.credentials, f"{settings.type} provider")
    for key in ("max_instances", "endpoint_url"):
        if getattr(settings, key) is not None:
            raise ValueError(
                f"{key} is not used by {settings.type} providers (bmc_nodes is the list)"
            )
    if not options.bmc_nodes:
        raise ValueError(f"{settings.type} providers need bmc_nodes (the nodes and their BMCs)")
    seen: dict[str, str] = {}
    endpoints: dict[tuple[str, int, str | None], str] = {}
    for entry in options.bmc_nodes:
        for node in entry.node_names:
            if node in seen:
                raise ValueError(f"bmc_nodes: node {node!r} is listed twice")
            seen[node] = entry.nodes
            if entry.credentials is None and settings.credentials.source == "none":
                raise ValueError(
                    f"bmc_nodes: node {node!r} has no credentials (set credentials on the "
                    "provider or on its bmc_nodes entry)"
                )
            endpoint = (
                entry.address.replace("{node}", node),
                entry.port or options.default_port,
                None if entry.system is None else entry.system.replace("{node}", node),
            )
            if endpoint in endpoints:
                raise ValueError(
                    f"bmc_nodes: nodes {endpoints[endpoint]!r} and {node!r} have the same BMC "
                    "address, port and system (use {node} in address or system)"
                )
            endpoints[endpoint] = node


IPMI = ProviderKind(
    type="ipmi",
    provider="clustermgr.providers.bmc.ipmi:IpmiProvider",
    credential_sources=BMC_CREDENTIALS,
    billing=(1, 0),
    options=IpmiOptions,
    extra="onprem",
    onprem=True,
    check=check,
)
REDFISH = ProviderKind(
    type="redfish",
    provider="clustermgr.providers.bmc.redfish:RedfishProvider",
    credential_sources=BMC_CREDENTIALS,
    billing=(1, 0),
    options=RedfishOptions,
    extra="onprem",
    onprem=True,
    check=check,
)

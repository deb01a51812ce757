"""The ipmi and redfish provider types, as the configuration and the registry see them (no
SDK import): on-prem nodes, no cloud bill, and the checks across a BMC provider's keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clustermgr.kinds import ProviderKind

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

BMC_KEYS = frozenset({"bmc_nodes", "bmc_timeout_s", "soft_off_timeout_s", "hard_off_timeout_s"})
# "none" on the provider: every bmc_nodes entry names its own credentials
BMC_CREDENTIALS = ("none", "password_file", "password_env")


def default_port(settings: ProviderSettings) -> int:
    """The BMC port of a bmc_nodes entry without one: IPMI 623, Redfish 443 or 80."""
    if settings.type == "redfish":
        return 443 if settings.redfish_scheme == "https" else 80
    return 623


def check(settings: Any) -> None:
    """Credentials, the node list and one BMC endpoint per node (ValueError: one line)."""
    from clustermgr.config.providers import check_bmc_credentials

    if settings.credentials.source != "none":
        check_bmc_credentials(settings.credentials, f"{settings.type} provider")
    for key in ("max_instances", "endpoint_url"):
        if getattr(settings, key) is not None:
            raise ValueError(
                f"{key} is not used by {settings.type} providers (bmc_nodes is the list)"
            )
    if not settings.bmc_nodes:
        raise ValueError(f"{settings.type} providers need bmc_nodes (the nodes and their BMCs)")
    seen: dict[str, str] = {}
    endpoints: dict[tuple[str, int, str | None], str] = {}
    for entry in settings.bmc_nodes:
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
                entry.port or default_port(settings),
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
    keys=BMC_KEYS | {"ipmi_cipher_suite", "ipmi_privilege"},
    extra="onprem",
    onprem=True,
    check=check,
)
REDFISH = ProviderKind(
    type="redfish",
    provider="clustermgr.providers.bmc.redfish:RedfishProvider",
    credential_sources=BMC_CREDENTIALS,
    billing=(1, 0),
    keys=BMC_KEYS | {"redfish_scheme", "tls_verify", "tls_ca_file"},
    extra="onprem",
    onprem=True,
    check=check,
)

"""The ipmi and redfish provider types, as the configuration and the registry see them (no
SDK import): on-prem nodes, no cloud bill."""

from __future__ import annotations

from clustermgr.kinds import ProviderKind

BMC_KEYS = frozenset({"bmc_nodes", "bmc_timeout_s", "soft_off_timeout_s", "hard_off_timeout_s"})
# "none" on the provider: every bmc_nodes entry names its own credentials
BMC_CREDENTIALS = ("none", "password_file", "password_env")

IPMI = ProviderKind(
    type="ipmi",
    provider="clustermgr.providers.bmc.ipmi:IpmiProvider",
    credential_sources=BMC_CREDENTIALS,
    billing=(1, 0),
    keys=BMC_KEYS | {"ipmi_cipher_suite", "ipmi_privilege"},
    extra="onprem",
    onprem=True,
)
REDFISH = ProviderKind(
    type="redfish",
    provider="clustermgr.providers.bmc.redfish:RedfishProvider",
    credential_sources=BMC_CREDENTIALS,
    billing=(1, 0),
    keys=BMC_KEYS | {"redfish_scheme", "tls_verify", "tls_ca_file"},
    extra="onprem",
    onprem=True,
)

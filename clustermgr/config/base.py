"""What every settings table shares: the strict model, names, provider kinds and the
credential sources each understands."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from clustermgr.inputs import has_control, slurm_word_problem

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


ProviderType = Literal["aws", "azure", "openstack", "local", "ipmi", "redfish"]


CredentialSource = Literal[
    "chain",
    "profile",
    "default",
    "client_secret_file",
    "client_secret_env",
    "clouds_yaml",
    "password_file",
    "password_env",
    "none",
]


# On-prem power providers: a BMC per node, no cloud bill.
BMC_TYPES = ("ipmi", "redfish")


BMC_CREDENTIAL_SOURCES = {"password_file", "password_env"}


ONPREM_BILLING = (1, 0)


# Which credential sources and provider-specific keys each provider type understands.
CREDENTIAL_SOURCES: dict[str, set[str]] = {
    "aws": {"chain", "profile"},
    "azure": {"default", "client_secret_file", "client_secret_env"},
    "openstack": {"clouds_yaml"},
    "local": {"none"},
    # "none" on the provider: every bmc_nodes entry names its own credentials
    "ipmi": {"password_file", "password_env", "none"},
    "redfish": {"password_file", "password_env", "none"},
}


NATURAL_CREDENTIALS = {
    "aws": "chain",
    "azure": "default",
    "openstack": "clouds_yaml",
    "local": "none",
    "ipmi": "none",
    "redfish": "none",
}


BMC_KEYS = {"bmc_nodes", "bmc_timeout_s", "soft_off_timeout_s", "hard_off_timeout_s"}


# polling_interval_s is shared by azure (LRO polls) and openstack (waits for ACTIVE).
PROVIDER_ONLY_KEYS: dict[str, set[str]] = {
    "aws": {"launch_batch_size", "terminate_batch_size", "retry_mode"},
    "azure": {
        "subscription_id",
        "resource_group",
        "authority_host",
        "disable_instance_discovery",
    },
    "openstack": set(),
    "local": {"subnet", "state_dir"},
    "ipmi": BMC_KEYS | {"ipmi_cipher_suite", "ipmi_privilege"},
    "redfish": BMC_KEYS | {"redfish_scheme", "tls_verify", "tls_ca_file"},
}


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def slurm_name(value: str) -> str:
    """The value, if Slurm would read it as one name (it reaches slurm.conf or scontrol)."""
    problem = slurm_word_problem(value)
    if problem:
        raise ValueError(problem)
    return value


SLURM_PATH_UNSAFE = frozenset(" #=,\"'\\")


def slurm_conf_path(value: Path) -> Path:
    """A path slurm.conf names (a hook program): absolute, one word, nothing Slurm splits on."""
    text = str(value)
    if not value.is_absolute() or has_control(text) or SLURM_PATH_UNSAFE & set(text):
        raise ValueError(
            f"{text!r} must be an absolute path without spaces, control "
            "characters, '#', '=', ',' or quotes (slurm.conf would split it)"
        )
    return value

"""Typed settings from /etc/clustermgr/clustermgr.toml (pydantic v2 at the edge, typed below).

Every table forbids unknown keys. Secrets never live here: a provider names where its
credentials come from (`credentials.source`), never the secret itself.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from clustermgr.errors import ConfigError
from clustermgr.hostlists import HostlistError, compress, expand
from clustermgr.pricing import DEFAULT_BILLING, BillingRule, Price

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


class ClusterSettings(StrictModel):
    name: str = Field("cluster", pattern=NAME_PATTERN)
    head_address: str = ""


class DatabaseSettings(StrictModel):
    url: str | None = None
    busy_timeout_s: float = Field(30.0, gt=0)


class SlurmSettings(StrictModel):
    bin_dir: Path = Path("/usr/bin")
    sbin_dir: Path = Path("/usr/sbin")
    command_timeout_s: float = Field(30.0, gt=0)
    onprem_partitions: list[str] = []
    conf_server: str = ""  # HOST[:PORT] burst nodes fetch slurm.conf from; default head_address
    munge_key_path: str = "/etc/munge/munge.key"
    hook_path: Path = Path("/usr/local/bin/clustermgr")


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
    port: int | None = Field(None, ge=1, le=65535)  # default: ProviderSettings.bmc_default_port
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
            if not re.match(NAME_PATTERN, name):
                raise ValueError(f"nodes {self.nodes!r}: {name!r} is not a node name")
        if self.credentials is not None:
            check_bmc_credentials(self.credentials, f"bmc_nodes entry {self.nodes!r}")
        return self

    @property
    def node_names(self) -> list[str]:
        return expand(self.nodes)


class ProviderSettings(StrictModel):
    name: str = Field(pattern=NAME_PATTERN)
    type: ProviderType
    region: str = Field(min_length=1)
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

    @model_validator(mode="before")
    @classmethod
    def _keys_of_other_types(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("type") in NATURAL_CREDENTIALS:
            own = PROVIDER_ONLY_KEYS[data["type"]]
            for keys in PROVIDER_ONLY_KEYS.values():
                for key in sorted((keys - own) & set(data)):
                    owners = " and ".join(k for k, ks in PROVIDER_ONLY_KEYS.items() if key in ks)
                    raise ValueError(f"key {key!r} is only for {owners} providers")
            creds = data.get("credentials", {})
            if isinstance(creds, dict) and "source" not in creds:
                natural = NATURAL_CREDENTIALS[data["type"]]
                data = {**data, "credentials": {**creds, "source": natural}}
        return data

    @model_validator(mode="after")
    def _credentials_fit_type(self) -> ProviderSettings:
        allowed = CREDENTIAL_SOURCES[self.type]
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
        if self.type == "azure" and not (self.subscription_id and self.resource_group):
            raise ValueError("azure providers need subscription_id and resource_group")
        if self.type in BMC_TYPES:
            self._check_bmc()
        return self

    def _check_bmc(self) -> None:
        if self.credentials.source != "none":
            check_bmc_credentials(self.credentials, f"{self.type} provider")
        for key in ("max_instances", "endpoint_url"):
            if getattr(self, key) is not None:
                raise ValueError(
                    f"{key} is not used by {self.type} providers (bmc_nodes is the list)"
                )
        if not self.bmc_nodes:
            raise ValueError(f"{self.type} providers need bmc_nodes (the nodes and their BMCs)")
        seen: dict[str, str] = {}
        endpoints: dict[tuple[str, int, str | None], str] = {}
        for entry in self.bmc_nodes:
            for node in entry.node_names:
                if node in seen:
                    raise ValueError(f"bmc_nodes: node {node!r} is listed twice")
                seen[node] = entry.nodes
                if entry.credentials is None and self.credentials.source == "none":
                    raise ValueError(
                        f"bmc_nodes: node {node!r} has no credentials (set credentials on the "
                        "provider or on its bmc_nodes entry)"
                    )
                endpoint = (
                    entry.address.replace("{node}", node),
                    entry.port or self.bmc_default_port,
                    None if entry.system is None else entry.system.replace("{node}", node),
                )
                if endpoint in endpoints:
                    raise ValueError(
                        f"bmc_nodes: nodes {endpoints[endpoint]!r} and {node!r} have the same BMC "
                        "address, port and system (use {node} in address or system)"
                    )
                endpoints[endpoint] = node

    @property
    def bmc_default_port(self) -> int:
        """The BMC port of a bmc_nodes entry without one: IPMI 623, Redfish 443 or 80."""
        if self.type == "redfish":
            return 443 if self.redfish_scheme == "https" else 80
        return 623

    @property
    def bmc_node_names(self) -> list[str]:
        """Every node an ipmi/redfish provider powers, in configuration order."""
        return [node for entry in self.bmc_nodes for node in entry.node_names]

    @property
    def billing(self) -> BillingRule:
        """The provider's billing rule: its type's default unless the config overrides it."""
        increment, minimum = DEFAULT_BILLING.get(self.type, ONPREM_BILLING)
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

    @model_validator(mode="after")
    def _check(self) -> TemplateSettings:
        try:
            slots = expand(self.nodes)
        except HostlistError as exc:
            raise ValueError(f"nodes {self.nodes!r} is not a valid Slurm hostlist: {exc}") from None
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


_ARG_SAFE = r"^[^\s'\"\\]+$"  # one word: rsync splits its -e value on spaces


class KeyPushSettings(StrictModel):
    """How clustermgr puts munge_key_file on a cloud director: rsync over ssh
    (directors/keypush.py), never user data."""

    identity_file: Path  # the head's private key that the director's ssh_user accepts
    ssh_user: str = Field("root", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    ssh_port: int = Field(22, ge=1, le=65535)
    remote_path: str = Field("/etc/clustermgr/director/munge.key", pattern=r"^/[^\s'\"\\]*$")
    owner: str = Field("munge:munge", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*:[A-Za-z0-9_.-]+$")
    rsync_path: str | None = None  # the remote rsync, e.g. "sudo rsync" for a non-root user
    connect_timeout_s: float = Field(15.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> KeyPushSettings:
        if not re.match(_ARG_SAFE, str(self.identity_file)):
            raise ValueError(f"identity_file {str(self.identity_file)!r}: no spaces or quotes")
        return self


class DirectorSettings(StrictModel):
    """The cloud director of one provider's region (docs/directors.md): launched before the
    region's first burst node, health-checked, replaced when lost, stopped when idle."""

    provider: str = Field(min_length=1)
    region: str | None = None  # the provider's region (a provider is one region); checked
    instance_type: str = Field(min_length=1)
    image: str = Field(min_length=1)
    volume_size_gb: int | None = Field(None, ge=1)  # root volume; None: the image's own size
    zones: list[str] = []
    subnets: list[str] = []
    security_groups: list[str] = []
    instance_profile: str | None = None
    key_name: str | None = None
    network: str | None = None
    required: bool = True  # burst nodes of the region launch only while it is READY
    idle_stop_after_s: float | None = Field(None, gt=0)  # None: never stopped for idleness
    boot_timeout_s: float = Field(900.0, gt=0)  # launch -> answering on its ports, or LOST
    health_interval_s: float = Field(60.0, gt=0)  # between checks of a READY director
    lost_after_failed_checks: int = Field(3, ge=1)  # UNHEALTHY this many intervals: LOST
    health_ports: list[int] = Field([389, 636, 873], min_length=1)  # TCP: ldap, ldaps, rsync
    health_timeout_s: float = Field(3.0, gt=0)  # one TCP connect
    images: list[str] = []  # image names whose current revision must be verified on it
    ldap: bool = False  # READY needs its LDAP replica in state "ok"
    # the director's user data: a template (@{name} placeholders, directors/userdata.py);
    # None: a local provider's lab director gets its facts from [ldap] and [images], a
    # cloud director none (its machine image sets up slapd and the rsync daemon)
    user_data_file: Path | None = None
    # the munge key the director serves to its region's nodes (rsync module clustermgr-keys):
    # its path on the head, a fact for the user data (the lab director copies it)
    munge_key_file: Path | None = None
    # a cloud director: clustermgr pushes munge_key_file to it over ssh once it answers
    key_push: KeyPushSettings | None = None

    @model_validator(mode="after")
    def _check(self) -> DirectorSettings:
        if self.key_push is not None and self.munge_key_file is None:
            raise ValueError("key_push needs munge_key_file (the key to push)")
        for port in self.health_ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"health_ports: {port} is not a TCP port (1-65535)")
        return self


class PolicyRef(StrictModel):
    name: str
    path: Path | None = None
    options: dict[str, Any] = {}


class PolicySettings(StrictModel):
    chain: list[PolicyRef] = []
    timeout_s: float = Field(5.0, gt=0)


class DaemonSettings(StrictModel):
    interval_s: float = Field(30.0, gt=0)
    reconcile_interval_s: float = Field(60.0, gt=0)
    catalog_refresh_s: float = Field(3600.0, gt=0)
    state_dir: Path = Path("/var/lib/clustermgr")
    orphan_grace_s: float = Field(300.0, ge=0)
    heartbeat_stale_s: float = Field(120.0, gt=0)
    metrics_address: str = "127.0.0.1"
    metrics_port: int = Field(9464, ge=0, le=65535)
    protect_after_failures: int = Field(10, ge=0)
    protect_backoff_s: float = Field(1800.0, ge=0)
    # a template whose launches fail with THROTTLED or TRANSIENT (after the SDK's retries)
    # waits this long before its next launch, doubling per failure in a row up to the max;
    # 0 retries every cycle
    launch_backoff_s: float = Field(30.0, ge=0)
    launch_backoff_max_s: float = Field(600.0, ge=0)


class ImagesSettings(StrictModel):
    """Software image definitions and their replication to the cloud directors
    (docs/directors.md, "Images and replication")."""

    definitions_dir: Path | None = None  # default: the images/ shipped with clustermgr
    rsync_port: int = Field(873, ge=1, le=65535)  # every director's rsync daemon
    rsync_module: str = Field("clustermgr-images", pattern=NAME_PATTERN)
    # director name -> where its copy goes instead: a directory, or rsync://HOST:PORT/MODULE
    targets: dict[str, str] = {}
    acls: bool = True  # rsync -A (the director's filesystem must support POSIX ACLs)
    xattrs: bool = True  # rsync -X
    timeout_s: float = Field(3600.0, gt=0)  # one rsync run, then it is stopped
    sync_interval_s: float = Field(900.0, gt=0)  # cm-scale's scheduled sync_all


class SimulateSettings(StrictModel):
    """`clustermgr simulate` only: the modelled on-prem partition and cloud behaviour."""

    onprem_nodes: int | None = Field(None, ge=0)  # default: the trace's largest job
    onprem_cpus: int | None = Field(None, ge=1)  # node shape; default: the first template's
    onprem_gpus: int | None = Field(None, ge=0)
    onprem_memory_mb: int | None = Field(None, ge=1)
    boot_delay_s: dict[str, float] = {}  # per template: launch -> joins Slurm
    default_boot_delay_s: float = Field(600.0, ge=0)
    # Slurm's power saving on the on-prem partition: an on-prem node idle this long is
    # powered off (None: never) and powered on again for a job, which waits for its boot
    onprem_suspend_after_s: float | None = Field(None, ge=0)
    onprem_boot_delay_s: float = Field(300.0, ge=0)
    onprem_keep_on: int = Field(0, ge=0)  # nodes that always stay on (SuspendExcNodes)
    onprem_idle_kw: float = Field(0.0, ge=0)  # an idle on-prem node's draw: the kWh saved
    spot_reclaim_per_hour: float = Field(0.01, ge=0)
    tick_s: float = Field(60.0, gt=0)
    backfill_depth: int = Field(200, ge=0)
    seed: int = 0
    # options of policies named in `--policy a+b` that the [policy] chain does not hold
    options: dict[str, dict[str, Any]] = {}


class StagingRegionSettings(StrictModel):
    """Where cmsub stages a region's data, and how its jobs are pinned there."""

    provider: str = Field(pattern=NAME_PATTERN)  # the region (a provider is one region)
    partition: str = Field(min_length=1)  # the user's job runs here
    features: list[str] = []  # sbatch --constraint for the job (AND); default: [provider]
    # rsync: an rsync daemon URL (rsync://HOST[:PORT]/MODULE[/PATH]) or a local directory
    rsync_target: str = ""
    node_root: str = ""  # the staging root as the region's burst nodes see it (a mount)
    s3_bucket: str = ""
    s3_prefix: str = "cmsub"
    s3_endpoint_url: str | None = None  # default: the provider's endpoint_url


class StagingSettings(StrictModel):
    """cmsub: job data staged in and out of burst regions by the user's own Slurm jobs."""

    data_mover_partition: str = Field("datamover", min_length=1)
    default_transport: Literal["rsync", "s3"] = "rsync"
    quota_bytes: int = Field(1024**4, ge=0)  # per user: staged bytes held at once
    retention_s: float = Field(0.0, ge=0)  # keep a job's staging area this long after stage-out
    transfer_command: Path = Path("/usr/local/bin/cmsub-transfer")  # what the transfer jobs run
    s3_part_size_mb: int = Field(64, ge=5, le=5120)
    s3_workers: int = Field(8, ge=1, le=64)
    regions: list[StagingRegionSettings] = []

    def region(self, provider: str | None) -> StagingRegionSettings:
        if not self.regions:
            raise ConfigError(
                "no [[staging.regions]] in the configuration: cmsub has nowhere to stage"
            )
        if provider is None:
            return self.regions[0]
        for region in self.regions:
            if region.provider == provider:
                return region
        known = ", ".join(r.provider for r in self.regions)
        raise ConfigError(f"--region {provider!r} is not in [[staging.regions]] (known: {known})")


LdapTls = Literal["none", "starttls", "ldaps"]
LDAP_PASSWORD_SOURCES = {"password_file", "password_env"}


def _check_ldap_password(creds: Credentials, where: str) -> None:
    """An LDAP bind password comes from a file (its first line) or an environment variable."""
    if creds.source not in LDAP_PASSWORD_SOURCES:
        raise ValueError(f"{where}: credentials.source must be password_file or password_env")
    if creds.source == "password_file" and not creds.secret_file:
        raise ValueError(
            f"{where}: credentials.source 'password_file' needs credentials.secret_file"
        )
    if creds.source == "password_env" and not creds.secret_env:
        raise ValueError(f"{where}: credentials.source 'password_env' needs credentials.secret_env")


def _check_ldap_tls(uri: str | None, tls: LdapTls, ca_file: Path | None, where: str) -> None:
    if uri is not None and not uri.startswith(("ldap://", "ldaps://")):
        raise ValueError(f"{where}: uri must start with ldap:// or ldaps:// (got {uri!r})")
    if uri is not None and uri.startswith("ldaps://") != (tls == "ldaps"):
        raise ValueError(f"{where}: an ldaps:// uri goes with tls = 'ldaps', and only it")
    if tls == "none" and ca_file is not None:
        raise ValueError(f"{where}: ca_file is set but tls is 'none'")


class LdapHeadSettings(StrictModel):
    """The head node's directory: where to read it, as whom (the password never here)."""

    uri: str = Field(min_length=1)  # ldap://head:389 or ldaps://head:636
    bind_dn: str = Field(min_length=1)
    credentials: Credentials = Credentials(source="password_file")
    tls: LdapTls = "none"
    ca_file: Path | None = None  # the CA that signed the head's certificate

    @model_validator(mode="after")
    def _check(self) -> LdapHeadSettings:
        _check_ldap_password(self.credentials, "ldap.head")
        _check_ldap_tls(self.uri, self.tls, self.ca_file, "ldap.head")
        return self


class LdapReplicaSettings(StrictModel):
    """The slapd on every director: its port and the DN that writes its cn=config (syncrepl)
    or its data (pull). The director's private address comes from the database."""

    port: int = Field(389, ge=1, le=65535)
    admin_dn: str = Field(min_length=1)
    credentials: Credentials = Credentials(source="password_file")
    tls: LdapTls = "none"
    ca_file: Path | None = None

    @model_validator(mode="after")
    def _check(self) -> LdapReplicaSettings:
        _check_ldap_password(self.credentials, "ldap.replica")
        _check_ldap_tls(None, self.tls, self.ca_file, "ldap.replica")
        return self


class LdapSettings(StrictModel):
    """LDAP replication to the directors: OpenLDAP syncrepl where the head offers it, a pull
    sync otherwise (docs/directors.md)."""

    mode: Literal["syncrepl", "pull", "auto"] = "auto"
    suffix: str = Field(min_length=1)  # the head's naming context, also the replica's
    bases: list[str] = Field(min_length=1)  # users, groups, sudo, automount subtrees
    head: LdapHeadSettings
    replica: LdapReplicaSettings
    max_lag_s: float = Field(300.0, gt=0)  # syncrepl: re-seed a replica further behind
    # syncrepl: the consumer's retry schedule, "interval count" pairs, "+" for forever
    syncrepl_retry: str = Field("5 +", pattern=r"^\d+ (\d+|\+)( \d+ (\d+|\+))*$")
    page_size: int = Field(500, ge=1, le=100000)
    timeout_s: float = Field(10.0, gt=0)  # one connection or operation
    retries: int = Field(3, ge=1, le=20)  # attempts to reach a server before "unreachable"

    @model_validator(mode="after")
    def _check(self) -> LdapSettings:
        suffix = _dn_key(self.suffix)
        for base in self.bases:
            key = _dn_key(base)
            if key != suffix and not key.endswith("," + suffix):
                raise ValueError(f"ldap.bases: {base!r} is not under suffix {self.suffix!r}")
        return self


def _dn_key(dn: str) -> str:
    """A DN compared loosely: lower case, no blanks around the separators."""
    return ",".join(part.strip() for part in dn.lower().split(","))


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
            if template.market == "spot" and provider.type in ("local", "openstack"):
                raise ValueError(
                    f"template {template.name!r}: market 'spot' is not offered by "
                    f"{provider.type} provider {provider.name!r}"
                )
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


def is_onprem(provider: ProviderSettings) -> bool:
    """A provider that powers on-prem nodes through their BMCs (ipmi, redfish)."""
    return provider.type in BMC_TYPES


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
    classes = {e.instance_type for e in provider.bmc_nodes}
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


def _check_volume(where: str, size_gb: int | None, provider: ProviderSettings) -> None:
    """A root volume size only where the provider can size one (aws, azure, openstack)."""
    if size_gb is not None and (provider.type == "local" or provider.type in BMC_TYPES):
        raise ValueError(
            f"{where}: volume_size_gb is set, but {provider.type} provider {provider.name!r} "
            "cannot size a root volume (only aws, azure and openstack can): remove it"
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
        if provider.type in BMC_TYPES:
            raise ValueError(f"{where}: provider {provider.name!r} is on-prem; it has no director")
        _check_volume(where, director.volume_size_gb, provider)
        if director.key_push is not None and provider.type == "local":
            raise ValueError(
                f"{where}: key_push is for cloud directors; the local lab director copies "
                "munge_key_file itself (remove key_push)"
            )
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
        first = exc.errors()[0]
        location = _dotted(first["loc"], data)
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown key (check the spelling against etc/clustermgr.toml.example)"
        elif "input" in first and first["type"] not in ("missing", "value_error"):
            message = f"{message} (got {first['input']!r})"
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

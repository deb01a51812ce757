"""The smaller tables: [cluster], [database], [slurm], [policy], [daemon], [simulate],
[staging]."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from clustermgr.config.base import NAME_PATTERN, StrictModel, slurm_conf_path, slurm_name
from clustermgr.core.errors import ConfigError
from clustermgr.core.install import installed_program


def url_has_password(url: str | None) -> bool:
    """Whether a database URL carries a password (one that does not parse carries none)."""
    if not url:
        return False
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return bool(make_url(url).password)
    except ArgumentError:
        return False


class ClusterSettings(StrictModel):
    name: str = Field("cluster", pattern=NAME_PATTERN)
    head_address: str = ""


CREDENTIAL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"  # systemd's credential names, without '/'


class DatabaseSettings(StrictModel):
    url: str | None = None
    # the password, kept out of this file (the hooks, SlurmUser, read it): a root-only file
    # (its first line), or a systemd credential ($CREDENTIALS_DIRECTORY/<name>, which the
    # unit's LoadCredential= provides); with both, the credential when cm-scale's unit gives
    # it, else the file (root's CLI). Read when the database is opened (config/dbpassword.py)
    password_file: Path | None = None
    password_credential: str | None = Field(None, pattern=CREDENTIAL_NAME)
    busy_timeout_s: float = Field(30.0, gt=0)
    # node transitions, cluster events and spent launch request ids older than this go
    # (cm-scale prunes every prune_interval_s; `clustermgr db prune` at once); cost records stay
    retention_days: float = Field(180.0, gt=0)
    prune_interval_s: float = Field(6 * 3600.0, gt=0)

    @model_validator(mode="after")
    def _one_password_place(self) -> DatabaseSettings:
        if self.password_file is not None and not self.password_file.is_absolute():
            raise ValueError("password_file: an absolute path")
        if self.password_file is None and self.password_credential is None:
            return self
        if not self.url:
            raise ValueError("password_file/password_credential: set url (a PostgreSQL URL)")
        if url_has_password(self.url):
            raise ValueError(
                "url carries a password and password_file/password_credential gives one too: "
                "drop the password from the url"
            )
        return self


class SlurmSettings(StrictModel):
    bin_dir: Path = Path("/usr/bin")
    sbin_dir: Path = Path("/usr/sbin")
    command_timeout_s: float = Field(30.0, gt=0)
    onprem_partitions: list[str] = []
    conf_server: str = ""  # HOST[:PORT] burst nodes fetch slurm.conf from; default head_address
    # the key on the head (cm-scale serves it) and where a burst node's boot writes it
    munge_key_path: str = "/etc/munge/munge.key"
    # cm-scale's TLS listener on the conf server's host: booting nodes redeem their launch's
    # one-time token there for the key (clustermgr/mungekey, docs/security.md)
    munge_key_port: int = Field(6830, ge=1, le=65535)
    # the `clustermgr` Slurm's ResumeProgram/SuspendProgram run; its directory also holds
    # `clustermgr-health-check`. Default: the install reading this config (its venv's bin/)
    hook_path: Path = Field(default_factory=lambda: installed_program("clustermgr"))
    # Slurm's SlurmUser: the hooks run as it, so it (and root) alone may write the spool
    user: str = Field("slurm", pattern=r"^[a-z_][a-z0-9_.-]*[$]?$")

    @field_validator("onprem_partitions")
    @classmethod
    def _partitions(cls, partitions: list[str]) -> list[str]:
        return [slurm_name(partition) for partition in partitions]

    @field_validator("hook_path")
    @classmethod
    def _hook_path(cls, path: Path) -> Path:
        return slurm_conf_path(path)


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
    # a group given read access to the database and heartbeat (read-only clustermgr verbs)
    admin_group: str = Field("", pattern=r"^([a-z_][a-z0-9_.-]*[$]?)?$")
    orphan_grace_s: float = Field(300.0, ge=0)
    heartbeat_stale_s: float = Field(120.0, gt=0)  # the hooks' bound (workload/hooks.py)
    # the leader's lease: renewed with every heartbeat (every heartbeat_period_s); a leader
    # that stops renewing (dead, frozen, cut off) is replaced at the first standby cycle
    # after it runs out. `clustermgr status` calls a head stale past max(lease_s, 3 beats).
    lease_s: float = Field(20.0, gt=0)

    @property
    def heartbeat_period_s(self) -> float:
        return min(5.0, self.interval_s / 2)

    @property
    def status_stale_s(self) -> float:
        """A heartbeat older than this says the head is dead or frozen."""
        return min(self.heartbeat_stale_s, max(self.lease_s, 3 * self.heartbeat_period_s))

    @model_validator(mode="after")
    def _lease_outlives_two_beats(self) -> DaemonSettings:
        if self.lease_s < 2 * self.heartbeat_period_s:
            raise ValueError(
                f"lease_s ({self.lease_s:g}) must be at least two heartbeats "
                f"({2 * self.heartbeat_period_s:g} s: a heartbeat every min(5, interval_s / 2) "
                "s renews the lease)"
            )
        return self

    # a running cycle with no progress (no Slurm command, cloud call or commit returned) for
    # this long stops the systemd watchdog's pings (clustermgr/runtime/watchdog.py); above every
    # single call's own timeout, so only a call hung past its timeouts counts
    stall_timeout_s: float = Field(300.0, gt=0, le=86400)
    metrics_address: str = "127.0.0.1"
    metrics_port: int = Field(9464, ge=0, le=65535)
    protect_after_failures: int = Field(10, ge=0)
    protect_backoff_s: float = Field(1800.0, ge=0)
    # a template whose launches fail with THROTTLED or TRANSIENT (after the SDK's retries)
    # waits this long before its next launch, doubling per failure in a row up to the max;
    # 0 retries every cycle
    launch_backoff_s: float = Field(30.0, ge=0)
    launch_backoff_max_s: float = Field(600.0, ge=0)


class SimulateSettings(StrictModel):
    """`clustermgr simulate` only: the modelled on-prem partition and cloud behaviour."""

    onprem_nodes: int | None = Field(None, ge=0)  # default: the trace's largest job
    # node shape; default: an SWF trace's processors per node, else the first template's
    onprem_cpus: int | None = Field(None, ge=1)
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
    # per template: how many of its instances the simulated cloud runs at once (default: no
    # limit); launches past it fail for capacity and go to the fallback templates
    capacity: dict[str, int] = {}
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
    s3_role_arn: str = ""  # the role the service assumes to mint users' S3 credentials
    # an rsync:// target's per-user credentials: the file (root 0600) the staging service
    # writes `user:password` lines into, the director's `secrets file` (docs/staging.md)
    rsyncd_secrets: Path | None = None

    @model_validator(mode="after")
    def _daemon_needs_secrets(self) -> StagingRegionSettings:
        if "::" in self.rsync_target:
            raise ValueError(
                "rsync_target: write a daemon as rsync://HOST[:PORT]/MODULE (a transfer "
                "reaches it as rsync://USER@HOST:PORT/MODULE)"
            )
        if self.rsync_target.startswith("rsync://") and self.rsyncd_secrets is None:
            raise ValueError(
                "an rsync:// rsync_target needs rsyncd_secrets (where the staging service "
                "writes the users' rsync passwords, docs/staging.md)"
            )
        if self.rsyncd_secrets is not None and not self.rsyncd_secrets.is_absolute():
            raise ValueError("rsyncd_secrets: an absolute path")
        return self

    @field_validator("partition")
    @classmethod
    def _partition(cls, partition: str) -> str:
        return slurm_name(partition)  # sbatch --partition

    @field_validator("features")
    @classmethod
    def _features(cls, features: list[str]) -> list[str]:
        return [slurm_name(feature) for feature in features]  # sbatch --constraint


class StagingSettings(StrictModel):
    """cmsub: job data staged in and out of burst regions by the user's own Slurm jobs."""

    data_mover_partition: str = Field("datamover", min_length=1)
    default_transport: Literal["rsync", "s3"] = "rsync"
    quota_bytes: int = Field(1024**4, ge=0)  # per user: staged bytes held at once
    retention_s: float = Field(0.0, ge=0)  # keep a job's staging area this long after stage-out
    # what the transfer jobs run (on the data movers); default: this install's cmsub-transfer
    transfer_command: Path = Field(default_factory=lambda: installed_program("cmsub-transfer"))
    s3_part_size_mb: int = Field(64, ge=5, le=5120)
    s3_workers: int = Field(8, ge=1, le=64)
    regions: list[StagingRegionSettings] = []
    # cmsub's channel to the staging service (a thread of cm-scale, root): a UNIX socket on
    # the head (SO_PEERCRED tells the caller's uid), and MUNGE-authenticated TCP for data
    # movers and burst nodes (`listen` on the head, `service` where clients reach it)
    socket: Path = Path("/run/clustermgr/cmsub.sock")
    listen: str = Field("", pattern=r"^$|^[^\s:]+:[0-9]{1,5}$")
    service: str = Field("", pattern=r"^$|^[^\s:]+:[0-9]{1,5}$")
    credential_max_age_s: float = Field(60.0, gt=0, le=300)  # older MUNGE credentials refused
    # what one caller can hold of the service (docs/staging.md "Limits"): a connection must
    # deliver its whole request within request_timeout_s; a caller (a uid on the socket, an
    # address over TCP) holds at most max_connections_per_caller at once, everyone together
    # max_connections; past either, or with fewer than descriptor_reserve descriptors left
    # to cm-scale (its cycle, heartbeat and hooks), a connection is closed at once
    request_timeout_s: float = Field(10.0, gt=0, le=300)
    max_connections: int = Field(256, ge=1, le=4096)
    max_connections_per_caller: int = Field(16, ge=1, le=4096)
    descriptor_reserve: int = Field(256, ge=16)
    backlog: int = Field(128, ge=1, le=65535)  # listen(2) queue of each door
    # a transfer whose region's director is not READY waits for it this long, asking again
    # every director_poll_s (its row `waiting`, its region demand for the director)
    director_wait_s: float = Field(3600.0, ge=0)
    director_poll_s: float = Field(15.0, gt=0)
    # users' S3 credentials (minted per transfer, scoped to their prefix) last this long
    s3_credentials_s: int = Field(43200, ge=900, le=129600)

    @field_validator("data_mover_partition")
    @classmethod
    def _data_mover_partition(cls, partition: str) -> str:
        return slurm_name(partition)

    @model_validator(mode="after")
    def _caps(self) -> StagingSettings:
        if self.max_connections_per_caller > self.max_connections:
            raise ValueError(
                f"max_connections_per_caller ({self.max_connections_per_caller}) is above "
                f"max_connections ({self.max_connections})"
            )
        return self

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

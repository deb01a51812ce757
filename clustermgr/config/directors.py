"""[[directors]], [images] and [ldap]: the per-region cloud directors and what they serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from clustermgr.config.base import NAME_PATTERN, StrictModel
from clustermgr.config.providers import Credentials
from clustermgr.core.ldap_attrs import DEFAULT_REPLICA_ATTRIBUTES, attribute_problem


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

    @model_validator(mode="before")
    @classmethod
    def _no_munge_key(cls, data: object) -> object:
        gone = [k for k in ("munge_key_file", "key_push") if isinstance(data, dict) and k in data]
        if gone:
            raise ValueError(
                f"{' and '.join(gone)}: a director no longer holds the munge key (burst nodes "
                "get it from cm-scale's key server, docs/security.md); remove it"
            )
        return data

    @model_validator(mode="after")
    def _check(self) -> DirectorSettings:
        for port in self.health_ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"health_ports: {port} is not a TCP port (1-65535)")
        return self


class ImagesSettings(StrictModel):
    """Software image definitions and their replication to the cloud directors
    (docs/directors.md, "Images and replication")."""

    definitions_dir: Path | None = None  # default: the images/ shipped with clustermgr
    rsync_port: int = Field(873, ge=1, le=65535)  # every director's rsync daemon
    rsync_module: str = Field("clustermgr-images", pattern=NAME_PATTERN)
    # the push module's secrets file, which cm-scale writes (root 0600) and the lab
    # director's daemon reads; default <state_dir>/images-push.secrets
    push_secrets: Path | None = None
    # director name -> where its copy goes instead: a directory, or rsync://HOST:PORT/MODULE
    targets: dict[str, str] = {}
    acls: bool = True  # rsync -A (the director's filesystem must support POSIX ACLs)
    xattrs: bool = True  # rsync -X
    timeout_s: float = Field(3600.0, gt=0)  # one rsync run, then it is stopped
    sync_interval_s: float = Field(900.0, gt=0)  # cm-scale's scheduled sync_all

    @model_validator(mode="after")
    def _check_paths(self) -> ImagesSettings:
        if self.push_secrets is not None and not self.push_secrets.is_absolute():
            raise ValueError("push_secrets: an absolute path")
        return self


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
    # TLS unless set to "none" explicitly: ldaps for an ldaps:// uri, else StartTLS
    tls: LdapTls = "starttls"
    ca_file: Path | None = None  # the CA that signed the head's certificate

    @model_validator(mode="before")
    @classmethod
    def _tls_from_uri(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tls" not in data:
            uri = data.get("uri")
            tls = "ldaps" if isinstance(uri, str) and uri.startswith("ldaps://") else "starttls"
            return {**data, "tls": tls}
        return data

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
    tls: LdapTls = "starttls"  # "none" only when set: the replica password would go in clear
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
    # what reaches the replicas (both modes), objectClass always: a node's name service
    # needs no more (docs/directors.md, "What a replica holds"); never a password attribute
    attributes: list[str] = Field(list(DEFAULT_REPLICA_ATTRIBUTES), min_length=1, max_length=200)

    @field_validator("attributes")
    @classmethod
    def _check_attributes(cls, names: list[str]) -> list[str]:
        for name in names:
            problem = attribute_problem(name)
            if problem is not None:
                raise ValueError(f"ldap.attributes: {problem} (remove it)")
        return names

    @model_validator(mode="after")
    def _check(self) -> LdapSettings:
        suffix = _dn_key(self.suffix)
        for base in self.bases:
            key = _dn_key(base)
            if key != suffix and not key.endswith("," + suffix):
                raise ValueError(f"ldap.bases: {base!r} is not under suffix {self.suffix!r}")
        return self

    def clear_text_warnings(self) -> list[str]:
        """A `config check` line for each side set to `tls = "none"`."""
        lines = []
        if self.head.tls == "none":
            what = "the head's bind password (written into each replica's syncrepl config too)"
            lines.append(f'warning: ldap.head.tls = "none": {what} crosses the network in clear')
        if self.replica.tls == "none":
            lines.append(
                'warning: ldap.replica.tls = "none": the replica admin password crosses the '
                "network in clear"
            )
        return lines


def _dn_key(dn: str) -> str:
    """A DN compared loosely: lower case, no blanks around the separators."""
    return ",".join(part.strip() for part in dn.lower().split(","))

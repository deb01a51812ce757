"""A director's user data: what its instance boots with.

`[[directors]] user_data_file` is a template with `@{name}` placeholders (as images/ use),
rendered with the director's facts (`DirectorFacts`: names, the LDAP replica's suffix, DN,
port, password *file* and attribute allow-list (`ldap_attributes`, comma-separated), the
rsync module and port, the region's subnet). A director never holds the munge key: burst
nodes get it from cm-scale's key server (clustermgr.mungekey).
Without a user_data_file, a local provider's director gets the lab director's
`#clustermgr-director` facts (providers/local/director.py) built from [ldap] and [images],
so the defaults work end to end (with cmsub's staging module when the provider's
[[staging.regions]] rsync_target is the director's daemon: its module, `node_root` as the
staging root, `rsyncd_secrets`); a cloud director gets none (its machine image sets up
slapd and the rsync daemon, docs/staging.md). Secrets travel as file paths only, never as
values.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from clustermgr.config import DirectorSettings, Settings
from clustermgr.core.errors import ConfigError
from clustermgr.core.ldap_attrs import effective
from clustermgr.directors.push_auth import PUSH_USER, push_module, secrets_path
from clustermgr.nodes.bootstrap import AtTemplate
from clustermgr.providers.base import DIRECTOR_MARK

CONFIG_SUFFIX = ",cn=config"


@dataclass(frozen=True)
class DirectorFacts:
    """The `@{name}` placeholders of a director's user-data template (all strings; empty
    when not configured)."""

    cluster: str
    director: str  # the director's name, director-<provider>-<region>
    provider: str
    provider_type: str
    region: str
    subnet: str  # the local provider's subnet
    ldap_suffix: str
    ldap_admin_dn: str  # the replica database's rootdn (what a pull sync writes as)
    ldap_password_file: str  # [ldap.replica]'s password file: both of its admin passwords
    ldap_port: str
    # [ldap] attributes, comma-separated: what the replica lets clients read
    ldap_attributes: str
    rsync_module: str  # [images] rsync_module: the images, read only (burst nodes pull)
    push_module: str  # the writable module the head syncs into (push_auth.py)
    push_user: str
    push_secrets: str  # the push module's secrets file (a path, never the password)
    rsync_port: str
    # cmsub's staging module, from the provider's [[staging.regions]] (an rsync:// target):
    staging_module: str  # the module its rsync_target names
    staging_root: str  # its node_root: the users' areas, <staging_root>/<user>
    rsyncd_secrets: str  # the secrets file the staging service writes (a path, never values)


def director_facts(settings: Settings, spec: DirectorSettings, name: str) -> DirectorFacts:
    provider = settings.provider(spec.provider)
    ldap = settings.ldap
    suffix = admin_dn = password_file = port = attributes = ""
    if ldap is not None:
        suffix, port = ldap.suffix, str(ldap.replica.port)
        attributes = ",".join(effective(ldap.attributes))
        replica_dn = ldap.replica.admin_dn
        # syncrepl writes cn=config as its admin; the database's rootdn is then the default
        is_config = replica_dn.lower().replace(" ", "").endswith(CONFIG_SUFFIX)
        admin_dn = f"cn=admin,{suffix}" if is_config else replica_dn
        creds = ldap.replica.credentials
        if creds.source == "password_file" and creds.secret_file:
            password_file = str(creds.secret_file)
    module, root, secrets = staging_facts(settings, provider.name)
    return DirectorFacts(
        cluster=settings.cluster.name,
        director=name,
        provider=provider.name,
        provider_type=provider.type,
        region=provider.region,
        subnet=str(provider.option("subnet") or ""),
        ldap_suffix=suffix,
        ldap_admin_dn=admin_dn,
        ldap_password_file=password_file,
        ldap_port=port,
        ldap_attributes=attributes,
        rsync_module=settings.images.rsync_module,
        push_module=push_module(settings.images.rsync_module),
        push_user=PUSH_USER,
        push_secrets=str(secrets_path(settings)),
        rsync_port=str(settings.images.rsync_port),
        staging_module=module,
        staging_root=root,
        rsyncd_secrets=secrets,
    )


def staging_facts(settings: Settings, provider: str) -> tuple[str, str, str]:
    """(module, staging root, secrets file) of the provider's [[staging.regions]] entry
    whose rsync_target is a director's daemon; empty strings when there is none."""
    for region in settings.staging.regions:
        target = region.rsync_target
        if region.provider != provider or not target.startswith("rsync://"):
            continue
        module = target.removeprefix("rsync://").partition("/")[2].partition("/")[0]
        secrets = str(region.rsyncd_secrets or "")
        return module, region.node_root, secrets
    return "", "", ""


def render_user_data(settings: Settings, spec: DirectorSettings, name: str) -> str:
    """The user data the director's instance is launched with (ConfigError: one line
    naming the file, the placeholder or the missing setting)."""
    facts = director_facts(settings, spec, name)
    if spec.user_data_file is not None:
        return render_file(spec, facts)
    if facts.provider_type == "local":
        return lab_director_facts(facts)
    return ""


def render_file(spec: DirectorSettings, facts: DirectorFacts) -> str:
    path = spec.user_data_file
    assert path is not None
    where = f"directors[{spec.provider}].user_data_file {path}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    try:
        return AtTemplate(text).substitute(asdict(facts))
    except KeyError as exc:
        known = ", ".join(asdict(facts))
        raise ConfigError(
            f"{where}: unknown placeholder @{{{exc.args[0]}}} (known: {known})"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc} (write @@ for a literal @)") from None


def lab_director_facts(facts: DirectorFacts) -> str:
    """The local lab director's `#clustermgr-director` TOML."""
    if not facts.ldap_suffix or not facts.ldap_password_file:
        raise ConfigError(
            f"director {facts.director}: a local lab director needs an [ldap] table whose "
            "replica credentials come from a password_file (its slapd's admin password), "
            "or [[directors]] user_data_file"
        )
    lines = [
        DIRECTOR_MARK,
        f"suffix = {json.dumps(facts.ldap_suffix)}",
        f"admin_dn = {json.dumps(facts.ldap_admin_dn)}",
        f"password_file = {json.dumps(facts.ldap_password_file)}",
        f"attributes = {json.dumps(facts.ldap_attributes.split(','))}",
        f"rsync_module = {json.dumps(facts.rsync_module)}",
        f"push_module = {json.dumps(facts.push_module)}",
        f"push_user = {json.dumps(facts.push_user)}",
        f"push_secrets = {json.dumps(facts.push_secrets)}",
    ]
    if facts.ldap_port:
        lines.append(f"ldap_port = {facts.ldap_port}")
    lines.append(f"rsync_port = {facts.rsync_port}")
    if facts.staging_root and facts.rsyncd_secrets:
        lines += [
            f"staging_module = {json.dumps(facts.staging_module)}",
            f"staging_root = {json.dumps(facts.staging_root)}",
            f"rsyncd_secrets = {json.dumps(facts.rsyncd_secrets)}",
        ]
    return "\n".join(lines) + "\n"

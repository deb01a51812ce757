"""A local provider instance that plays a cloud director: a real `slapd` (an empty replica
for the LDAP replication to fill, with a cn=config admin so syncrepl can be configured) and
an `rsync --daemon` serving the image tree, in the instance's network namespace, instead of
slurmd.

The launch spec says which: `tags["clustermgr-role"] == "director"` (directors/lifecycle.py
sets it). Its user data is a small TOML document (`#clustermgr-director` on the first line)
with the facts the director needs; secrets travel as file paths, never as values
(directors/userdata.py renders it from [ldap] and [images] when `[[directors]]` names no
`user_data_file`):

    #clustermgr-director
    suffix = "dc=example,dc=org"
    admin_dn = "cn=admin,dc=example,dc=org"     # default: cn=admin,<suffix>
    password_file = "/etc/clustermgr/director-ldap.secret"   # rootpw of both databases
    rsync_module = "clustermgr-images"          # default: "image"
    push_module = "clustermgr-images-push"      # the head's writable module (with:)
    push_user = "clustermgr"
    push_secrets = "/var/lib/clustermgr/images-push.secrets"  # cm-scale writes it, root 0600
    image_root = "/var/lib/clustermgr/director/image"   # default: <workdir>/image
    ldap_port = 389                             # slapd's port (default 389)
    rsync_port = 873                            # the rsync daemon's port (default 873)
    staging_root = "/srv/clustermgr-staging"    # cmsub's staging areas (none: no module)
    rsyncd_secrets = "/etc/clustermgr/rsyncd.secrets"   # users' passwords (root 0600)
    staging_module = "clustermgr-staging"       # default: "clustermgr-staging"
    tls_cert_file = "/etc/clustermgr/director.pem"   # slapd offers StartTLS with it
    tls_key_file = "/etc/clustermgr/director.key"    # (both or neither; root-only key)
    attributes = ["objectClass", "uid", ...]    # [ldap] attributes (or "uid,cn,..."):
                                                # what clients may read (default: the
                                                # default allow-list)

slapd's database answers under `clustermgr.core.ldap_attrs.replica_access_rules`: password
attributes to no one, the allow-list to any client, nothing else but to the cn=config
admin, and writes by its rootdn alone (the consumer, the pull sync).

The rsync daemon serves the images root twice: `rsync_module`, read only, chrooted, as
nobody (what burst nodes pull), and, when the user data names `push_secrets`, `push_module`,
writable for `push_user` alone by the password in that file (clustermgr syncs each image into
`<push module>/<image>/`), with `numeric ids = yes` and `munge symlinks = no` (so the tree's
symlinks and owners arrive as they are on the head). Nothing else can write the images.
A director never holds or serves the munge key: burst nodes get it from cm-scale's key
server (clustermgr.mungekey).

With `staging_root` and `rsyncd_secrets` it serves cmsub's staging module too, one static
module whose users are told apart by rsync's own authentication (docs/staging.md): each
user reaches `<staging_root>/<user>` only, chrooted into it and running as themselves,
with the password the staging service wrote into `rsyncd_secrets` (root 0600, read by the
daemon at every connection); root is refused. The daemon runs as root (the instance is
cm-scale's, root) so it can chroot and switch to the user.

The instance's files (slapd.d, its database, rsyncd.conf, the image copy unless
`image_root` says otherwise) live in `workdir`, which the provider removes with
the instance: a replacement director starts empty, as a new cloud instance would.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from clustermgr.core.ldap_attrs import (
    CONFIG_ADMIN,
    DEFAULT_REPLICA_ATTRIBUTES,
    attribute_problem,
    replica_access_rules,
)
from clustermgr.providers.base import DIRECTOR_MARK, LaunchSpec, invalid
from clustermgr.providers.local.errors import NetError
from clustermgr.providers.local.net import NETNS_DIR, TOOL_PATH, netns_name, start_time, tool

TAG_ROLE = "clustermgr-role"
ROLE_DIRECTOR = "director"
RSYNC_MODULE = "image"  # the images module when the user data names none
STAGING_MODULE = "clustermgr-staging"
SCHEMA_DIR = Path("/etc/ldap/schema")
SCHEMAS = ("core", "cosine", "nis", "inetorgperson")
MODULE_DIR = Path("/usr/lib/ldap")
MODULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# slapd and rsync in the namespace; the shell waits for both, so stopping it stops them.
DIRECTOR_SCRIPT = (
    'exec "$0" --fork --kill-child "$1" "--net=$2" /bin/sh -c '
    '\'"$0" -d 0 -F "$1" -h "$4" & "$2" --daemon --no-detach "--config=$3" & wait\' '
    '"$3" "$4" "$5" "$6" "$7"'
)


@dataclass(frozen=True)
class DirectorBoot:
    suffix: str
    admin_dn: str
    password_file: Path
    image_root: Path | None = None  # None: <workdir>/image
    rsync_module: str = RSYNC_MODULE
    ldap_port: int = 389
    rsync_port: int = 873
    staging_root: Path | None = None  # None: no staging module
    rsyncd_secrets: Path | None = None
    staging_module: str = STAGING_MODULE
    # the head's writable module beside rsync_module: for push_user alone, by the password
    # in push_secrets (cm-scale writes it, root 0600); none without push_secrets
    push_module: str = ""
    push_user: str = ""
    push_secrets: Path | None = None
    # slapd's certificate and key: it offers StartTLS (none: plain LDAP only)
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # what slapd lets clients read (the [ldap] allow-list the replication copies)
    attributes: tuple[str, ...] = DEFAULT_REPLICA_ATTRIBUTES


def is_director_spec(spec: LaunchSpec) -> bool:
    return spec.tags.get(TAG_ROLE) == ROLE_DIRECTOR


def parse_boot(spec: LaunchSpec) -> DirectorBoot:
    """The director's facts from its user data; ProviderError(INVALID) naming what is wrong."""
    user_data = spec.user_data
    if not user_data.startswith(DIRECTOR_MARK):
        why = f"must start with {DIRECTOR_MARK!r} (a director's facts, see director.py)"
        raise invalid("local", spec.template, "user_data", user_data[:40], why)
    try:
        data = tomllib.loads(user_data)
        suffix = str(data["suffix"])
        boot = DirectorBoot(
            suffix=suffix,
            admin_dn=str(data.get("admin_dn") or f"cn=admin,{suffix}"),
            password_file=Path(str(data["password_file"])),
            image_root=_path(data.get("image_root")),
            rsync_module=str(data.get("rsync_module") or RSYNC_MODULE),
            ldap_port=int(data.get("ldap_port") or 389),
            rsync_port=int(data.get("rsync_port") or 873),
            staging_root=_path(data.get("staging_root")),
            rsyncd_secrets=_path(data.get("rsyncd_secrets")),
            staging_module=str(data.get("staging_module") or STAGING_MODULE),
            push_module=str(data.get("push_module") or ""),
            push_user=str(data.get("push_user") or ""),
            push_secrets=_path(data.get("push_secrets")),
            tls_cert_file=_path(data.get("tls_cert_file")),
            tls_key_file=_path(data.get("tls_key_file")),
            attributes=_attributes(data.get("attributes")),
        )
        modules = [boot.rsync_module, boot.staging_module]
        if boot.push_secrets is not None:
            if not (boot.push_module and MODULE_NAME.fullmatch(boot.push_user)):
                raise KeyError("push_secrets needs push_module and push_user")
            modules.append(boot.push_module)
        for module in modules:
            if not MODULE_NAME.fullmatch(module) or module == "global":
                raise KeyError(f"rsync module {module!r} is not a usable module name")
        if len(set(modules)) != len(modules):
            raise KeyError(f"rsync modules {', '.join(modules)} must differ")
        if (boot.staging_root is None) != (boot.rsyncd_secrets is None):
            raise KeyError("staging_root and rsyncd_secrets go together")
        if (boot.tls_cert_file is None) != (boot.tls_key_file is None):
            raise KeyError("tls_cert_file and tls_key_file go together")
        for where in (
            boot.staging_root,
            boot.rsyncd_secrets,
            boot.push_secrets,
            boot.tls_cert_file,
            boot.tls_key_file,
        ):
            if where is not None and (not where.is_absolute() or "\n" in str(where)):
                raise KeyError(f"{str(where)[:80]!r}: an absolute path on one line")
    except (tomllib.TOMLDecodeError, KeyError, ValueError, TypeError) as exc:
        why = f"not a director's facts: {exc}"
        raise invalid("local", spec.template, "user_data", user_data[:40], why) from None
    return boot


def _attributes(value: object) -> tuple[str, ...]:
    """A TOML list or a comma-separated string (a template's placeholder); default when
    absent or empty."""
    names = value.split(",") if isinstance(value, str) else value
    if not names:
        return DEFAULT_REPLICA_ATTRIBUTES
    if not isinstance(names, list):
        raise KeyError("attributes: a list of attribute names")
    found = tuple(str(name).strip() for name in names)
    for name in found:
        problem = attribute_problem(name)
        if problem is not None:
            raise KeyError(f"attributes: {problem}")
    return found


def _path(value: object) -> Path | None:
    return Path(str(value)) if value else None


def image_root_of(boot: DirectorBoot, workdir: Path) -> Path:
    return boot.image_root or workdir / "image"


def write_configs(workdir: Path, boot: DirectorBoot) -> tuple[Path, Path]:
    """slapd's cn=config directory (built by slaptest) and rsyncd.conf, under `workdir`."""
    password = boot.password_file.read_text().splitlines()[0].strip()
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    image_root = image_root_of(boot, workdir)
    image_root.mkdir(parents=True, exist_ok=True)
    includes = "\n".join(f"include {SCHEMA_DIR / name}.schema" for name in SCHEMAS)
    conf = workdir / "slapd.conf"
    access = "".join(
        f"access {rule}\n"
        for rule in replica_access_rules(boot.suffix, boot.attributes, (CONFIG_ADMIN,))
    )
    tls = ""
    if boot.tls_cert_file is not None and boot.tls_key_file is not None:
        tls = (
            f"TLSCertificateFile {boot.tls_cert_file}\nTLSCertificateKeyFile {boot.tls_key_file}\n"
        )
    conf.write_text(
        f"{includes}\nmodulepath {MODULE_DIR}\nmoduleload back_mdb\nmoduleload syncprov\n"
        f"pidfile {workdir}/slapd.pid\nargsfile {workdir}/slapd.args\n{tls}\n"
        f'database config\nrootdn "{CONFIG_ADMIN}"\nrootpw {password}\n\n'
        f'database mdb\nsuffix "{boot.suffix}"\nrootdn "{boot.admin_dn}"\nrootpw {password}\n'
        f"directory {workdir}/data\nmaxsize 1073741824\nindex objectClass eq\n"
        f"index entryCSN,entryUUID eq\n{access}"
    )
    conf.chmod(0o600)
    config_dir = workdir / "slapd.d"
    shutil.rmtree(config_dir, ignore_errors=True)
    config_dir.mkdir()
    # an empty slapadd creates the (empty) database, which slaptest opens to convert
    for argv in (
        [tool("slapadd") or "/usr/sbin/slapadd", "-q", "-f", str(conf), "-l", os.devnull],
        [tool("slaptest") or "/usr/sbin/slaptest", "-f", str(conf), "-F", str(config_dir)],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            conf.unlink()
            why = f"{Path(argv[0]).name} failed: {done.stderr.strip()[-300:]}"
            raise NetError(why, code="SpawnFailed")
    conf.unlink()
    if boot.staging_root is not None:  # the users' <staging_root>/<user> are the service's
        boot.staging_root.mkdir(mode=0o755, parents=True, exist_ok=True)
    rsyncd = workdir / "rsyncd.conf"
    rsyncd.write_text(
        f"pid file = {workdir}/rsyncd.pid\nport = {boot.rsync_port}\n"
        "use chroot = no\nuid = root\ngid = root\n"
        # small messages (a created directory, the I/O timeout, each file's checksum) are
        # sent at once rather than after the client's delayed ACK (40 ms each)
        "socket options = TCP_NODELAY\n"
        # owners by number and symlinks as they are (use chroot = no would otherwise rewrite
        # every symlink target under /rsyncd-munged/)
        "numeric ids = yes\nmunge symlinks = no\nreverse lookup = no\n\n"
        f"{image_modules_conf(boot, image_root)}{staging_module_conf(boot)}"
    )
    return config_dir, rsyncd


def image_modules_conf(boot: DirectorBoot, image_root: Path) -> str:
    """The images, twice (rsyncd.conf text): read only for anyone who can reach the
    director (burst nodes pull from it), chrooted, as nobody, so only the tree's
    world-readable files are served; and, with push_secrets, writable as root for the push
    user alone (the head's replication), so no job on a burst node can change what every
    node runs."""
    text = (
        f"[{boot.rsync_module}]\npath = {image_root}\nread only = yes\n"
        "use chroot = yes\nuid = nobody\ngid = nogroup\nnumeric ids = yes\n"
    )
    if boot.push_secrets is not None:
        text += (
            f"\n[{boot.push_module}]\npath = {image_root}\nread only = no\n"
            f"auth users = {boot.push_user}:rw\nsecrets file = {boot.push_secrets}\n"
            "strict modes = yes\nlist = no\n"
        )
    return text


def staging_module_conf(boot: DirectorBoot) -> str:
    """cmsub's staging module (rsyncd.conf text; "" without a staging root): each user in
    `<staging_root>/<user>`, chrooted, as the user, by the password in the secrets file."""
    if boot.staging_root is None or boot.rsyncd_secrets is None:
        return ""
    return (
        f"\n[{boot.staging_module}]\n"
        f"path = {boot.staging_root}/%RSYNC_USER_NAME%\n"
        "use chroot = yes\nuid = %RSYNC_USER_NAME%\ngid = *\nread only = no\n"
        "auth users = root:deny, *\n"
        f"secrets file = {boot.rsyncd_secrets}\nstrict modes = yes\n"
        # chrooted: owners by number, and a link written by a job leads nowhere outside
        "numeric ids = yes\nmunge symlinks = no\n"
    )


def spawn_director(
    instance_id: str, boot: DirectorBoot, workdir: Path, log_path: Path
) -> tuple[int, int | None]:
    """slapd + rsync daemon in the instance's namespace, in a new session, detached:
    (pid, start time) of the session leader, as `net.spawn_slurmd` returns."""
    try:
        config_dir, rsyncd = write_configs(workdir, boot)
    except OSError as exc:  # the password file unreadable, the disk full
        raise NetError(
            f"cannot set up the director {instance_id}: {exc}", code="SpawnFailed"
        ) from None
    argv = [
        "/bin/sh",
        "-c",
        DIRECTOR_SCRIPT,
        tool("unshare") or "/usr/bin/unshare",
        tool("nsenter") or "/usr/bin/nsenter",
        str(NETNS_DIR / netns_name(instance_id)),
        tool("slapd") or "/usr/sbin/slapd",
        str(config_dir),
        tool("rsync") or "/usr/bin/rsync",
        str(rsyncd),
        f"ldap://:{boot.ldap_port}/",
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    env = {"PATH": TOOL_PATH, "LANG": "C.UTF-8"}
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    except OSError as exc:
        raise NetError(
            f"cannot start the director {instance_id}: {exc}", code="SpawnFailed"
        ) from None
    return pid, start_time(pid)

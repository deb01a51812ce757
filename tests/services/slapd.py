"""Throwaway OpenLDAP servers for the tests: Debian's `slapd`, a config directory
(cn=config, converted from a tiny slapd.conf by `slaptest`) and an mdb database under a
temporary directory, a free loopback port, run in the foreground (`-d 0`) and stopped by pid.

`make_server(..., provider=True)` loads the syncprov overlay (a head that can be a syncrepl
provider); otherwise the server is a plain directory (a head for pull mode, or a replica).
Every server has a cn=config admin (`cn=admin,cn=config`) and a database rootdn, so
clustermgr can configure it as a consumer and write its data. Recipe: REAL-COMPONENTS.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.labs.slurmlab import free_port

SLAPD = Path("/usr/sbin/slapd")
SLAPADD = Path("/usr/sbin/slapadd")
SLAPTEST = Path("/usr/sbin/slaptest")
MODULE_DIR = Path("/usr/lib/ldap")
SCHEMA_DIR = Path("/etc/ldap/schema")
SCHEMAS = ("core", "cosine", "nis", "inetorgperson")
START_TIMEOUT_S = 10.0
SUFFIX = "dc=example,dc=org"
CONFIG_DN = "cn=admin,cn=config"
ADMIN_PASSWORD = "admin-secret"
CONFIG_PASSWORD = "config-secret"

CONF = """\
{includes}
modulepath {modules}
moduleload back_mdb
{syncprov_module}
pidfile {workdir}/slapd.pid
argsfile {workdir}/slapd.args
sizelimit unlimited
{tls}

database config
rootdn "{config_dn}"
rootpw {config_password}

database mdb
suffix "{suffix}"
rootdn "{admin_dn}"
rootpw {admin_password}
directory {workdir}/data
maxsize 1073741824
dbnosync
index objectClass eq
index entryCSN,entryUUID eq
{access}{syncprov_overlay}
"""

# The replicator's account on the head, and the head-side rules docs/directors.md tells a
# site to put first (its own rules follow, reached through `break`): the replicator reads
# the bases, never a password attribute.
REPLICATOR_DN = f"cn=replicator,{SUFFIX}"
REPLICATOR_PASSWORD = "Replicator-Pw-77e1-never-shown"
HEAD_REPLICATOR_ACL = f"""\
access to attrs=userPassword by dn.exact="{REPLICATOR_DN}" none by * break
access to * by dn.exact="{REPLICATOR_DN}" read by * break
access to attrs=userPassword by self write by anonymous auth by * none
access to * by * read
"""


class SlapdUnavailable(Exception):
    """slapd cannot run here; the message says what is missing."""


@dataclass
class Slapd:
    """One slapd: its directories, port, credentials and (while running) pid."""

    workdir: Path
    port: int
    suffix: str
    admin_dn: str
    admin_password: str
    config_password: str
    config_dn: str = CONFIG_DN
    host: str = "127.0.0.1"  # the address it listens on (a lab bridge's, for namespaces)
    ldaps_port: int | None = None  # with TLS files: also ldaps:// here (and StartTLS on uri)
    pid: int | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return f"ldap://{self.host}:{self.port}"

    @property
    def ldaps_uri(self) -> str:
        assert self.ldaps_port is not None, "made without tls"
        return f"ldaps://{self.host}:{self.ldaps_port}"

    @property
    def log(self) -> Path:
        return self.workdir / "slapd.log"

    def start(self) -> None:
        """Run slapd in the foreground on its port; wait until it accepts connections."""
        if self.pid is not None:
            return
        urls = f"{self.uri}/" + (f" {self.ldaps_uri}/" if self.ldaps_port else "")
        with open(self.log, "ab") as log:
            self._process = subprocess.Popen(
                [str(SLAPD), "-d", "0", "-F", str(self.workdir / "slapd.d"), "-h", urls],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self._process.pid
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self.pid = None
                raise SlapdUnavailable(
                    f"slapd exited ({self._process.returncode}): "
                    f"{self.log.read_text(errors='replace')[-800:]}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), 0.2),
            ):
                return
            time.sleep(0.02)
        self.stop()
        raise SlapdUnavailable(f"slapd did not listen on {self.port} in {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL after 5 s; the data stays (start() again resumes it)."""
        if self.pid is None or self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._process.wait(5)
        self.pid = None
        self._process = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def available() -> str | None:
    """Why slapd cannot run here, or None when it can."""
    for tool in (SLAPD, SLAPADD, SLAPTEST):
        if not os.access(tool, os.X_OK):
            return f"no {tool} (apt-get install slapd ldap-utils)"
    if not (MODULE_DIR / "back_mdb.so").exists():
        return f"no back_mdb module in {MODULE_DIR}"
    return None


def make_server(
    workdir: Path,
    *,
    provider: bool = False,
    seed_ldif: str | None = None,
    suffix: str = SUFFIX,
    admin_password: str = ADMIN_PASSWORD,
    config_password: str = CONFIG_PASSWORD,
    extra_schemas: tuple[str, ...] = (),
    host: str = "127.0.0.1",
    tls: TlsFiles | None = None,
    replicator: bool = False,
) -> Slapd:
    """Write the config, load `seed_ldif` (slapadd), convert to cn=config; not started.
    With `tls`, the server offers StartTLS on its port and ldaps on a second one. With
    `replicator`, the database has a replicator account (REPLICATOR_DN, a sibling of the
    bases) and the head-side rules that keep password attributes from it."""
    why = available()
    if why:
        raise SlapdUnavailable(why)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "data").mkdir()
    (workdir / "slapd.d").mkdir()
    admin_dn = f"cn=admin,{suffix}"
    conf = workdir / "slapd.conf"
    conf.write_text(
        CONF.format(
            includes="\n".join(
                f"include {SCHEMA_DIR}/{name}.schema" for name in (*SCHEMAS, *extra_schemas)
            ),
            modules=MODULE_DIR,
            syncprov_module="moduleload syncprov" if provider else "",
            syncprov_overlay="overlay syncprov\nsyncprov-checkpoint 100 1" if provider else "",
            workdir=workdir,
            config_dn=CONFIG_DN,
            config_password=config_password,
            suffix=suffix,
            admin_dn=admin_dn,
            admin_password=admin_password,
            tls=tls.directives() if tls else "",
            access=HEAD_REPLICATOR_ACL.replace(SUFFIX, suffix) if replicator else "",
        )
    )
    if replicator:
        seed_ldif = (seed_ldif or "") + "\n" + replicator_ldif(suffix)
    ldif = workdir / "seed.ldif"
    ldif.write_text(seed_ldif or "")  # empty: slapadd still creates the database files
    _run([str(SLAPADD), "-q", "-f", str(conf), "-l", str(ldif)])
    _run([str(SLAPTEST), "-f", str(conf), "-F", str(workdir / "slapd.d")])
    return Slapd(
        workdir,
        free_port(),
        suffix,
        admin_dn,
        admin_password,
        config_password,
        host=host,
        ldaps_port=free_port() if tls else None,
    )


@dataclass(frozen=True)
class TlsFiles:
    """A server certificate, its key and the CA that signed it (PEM files)."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def directives(self) -> str:
        return (
            f"TLSCACertificateFile {self.ca_file}\n"
            f"TLSCertificateFile {self.cert_file}\n"
            f"TLSCertificateKeyFile {self.key_file}\n"
        )


def make_tls(workdir: Path, *hosts: str) -> TlsFiles:
    """A throwaway CA (trustme, built on `cryptography`) and a certificate for `hosts`
    (default 127.0.0.1)."""
    import trustme

    workdir.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert(*(hosts or ("127.0.0.1",)))
    files = TlsFiles(workdir / "ca.pem", workdir / "server.pem", workdir / "server.key")
    ca.cert_pem.write_to_path(str(files.ca_file))
    cert.cert_chain_pems[0].write_to_path(str(files.cert_file))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(files.cert_file), append=True)
    cert.private_key_pem.write_to_path(str(files.key_file))
    files.key_file.chmod(0o600)
    return files


def replicator_ldif(suffix: str = SUFFIX) -> str:
    return (
        f"dn: cn=replicator,{suffix}\nobjectClass: organizationalRole\n"
        f"objectClass: simpleSecurityObject\ncn: replicator\n"
        f"userPassword: {REPLICATOR_PASSWORD}\n"
    )


def director_replica(workdir: Path, *, attributes: tuple[str, ...] | None = None) -> Slapd:
    """A director's replica as the local provider configures it (its slapd.d, database and
    access rules from clustermgr.providers.local.director.write_configs), on a loopback
    port instead of in a namespace; not started. Both admins (the database's rootdn and
    cn=admin,cn=config) have ADMIN_PASSWORD."""
    from clustermgr.core.ldap_attrs import DEFAULT_REPLICA_ATTRIBUTES
    from clustermgr.providers.local.director import DirectorBoot, write_configs

    why = available()
    if why:
        raise SlapdUnavailable(why)
    workdir.mkdir(parents=True, exist_ok=True)
    password_file = workdir / "director.secret"
    password_file.write_text(ADMIN_PASSWORD + "\n")
    password_file.chmod(0o600)
    boot = DirectorBoot(
        suffix=SUFFIX,
        admin_dn=f"cn=admin,{SUFFIX}",
        password_file=password_file,
        attributes=attributes or DEFAULT_REPLICA_ATTRIBUTES,
    )
    write_configs(workdir, boot)
    return Slapd(workdir, free_port(), SUFFIX, boot.admin_dn, ADMIN_PASSWORD, ADMIN_PASSWORD)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise SlapdUnavailable(f"{' '.join(argv)} failed: {done.stderr.strip()[-800:]}")


def directory_ldif(suffix: str = SUFFIX, *, users: int = 0, groups: int = 0) -> str:
    """The suffix, ou=people and ou=groups, `users` posixAccounts and `groups` posixGroups
    (group i holds user i when there is one)."""
    top = suffix.split(",")[0].split("=")[1]
    parts = [
        f"dn: {suffix}\nobjectClass: dcObject\nobjectClass: organization\ndc: {top}\no: {top}\n",
        f"dn: ou=people,{suffix}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: ou=groups,{suffix}\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    parts.extend(user_ldif(i, suffix, stamped=True) for i in range(users))
    parts.extend(group_ldif(i, suffix, member=i < users, stamped=True) for i in range(groups))
    return "\n".join(parts)


def _stamp(i: int) -> str:
    """A directory grows over time: entry i was made i minutes after 2024-01-01 (slapadd
    keeps the stamps), so an incremental pull's watermark second holds one entry, not all."""
    at = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=i)
    return f"createTimestamp: {at:%Y%m%d%H%M%S}Z\nmodifyTimestamp: {at:%Y%m%d%H%M%S}Z\n"


def user_ldif(i: int, suffix: str = SUFFIX, *, stamped: bool = False) -> str:
    return (
        f"dn: uid=user{i:05d},ou=people,{suffix}\n"
        "objectClass: inetOrgPerson\nobjectClass: posixAccount\n"
        f"uid: user{i:05d}\ncn: User {i}\nsn: {i}\n"
        f"uidNumber: {10000 + i}\ngidNumber: {10000 + i}\n"
        f"homeDirectory: /home/user{i:05d}\nloginShell: /bin/bash\n"
        + (_stamp(i) if stamped else "")
    )


def group_ldif(i: int, suffix: str = SUFFIX, *, member: bool = True, stamped: bool = False) -> str:
    members = f"memberUid: user{i:05d}\n" if member else ""
    return (
        f"dn: cn=group{i:05d},ou=groups,{suffix}\nobjectClass: posixGroup\n"
        f"cn: group{i:05d}\ngidNumber: {10000 + i}\n{members}"
        + (_stamp(100000 + i) if stamped else "")
    )


def ldap_table(
    head: Slapd, replica: Slapd, secrets: Path, *, admin_dn: str, admin_password: str, **extra: Any
) -> dict[str, Any]:
    """An [ldap] table replicating ou=people and ou=groups from `head` to a director at
    127.0.0.1 whose slapd is `replica`; both passwords in files under `secrets`."""
    head_secret = secrets / f"head-{head.port}.secret"
    replica_secret = secrets / f"replica-{replica.port}.secret"
    head_secret.write_text(head.admin_password + "\n")
    replica_secret.write_text(admin_password + "\n")
    return {
        "suffix": head.suffix,
        "bases": [f"ou=people,{head.suffix}", f"ou=groups,{head.suffix}"],
        "head": {
            "uri": head.uri,
            "bind_dn": head.admin_dn,
            "credentials": {"source": "password_file", "secret_file": head_secret},
            "tls": "none",  # loopback test servers; TLS is the default elsewhere
        },
        "replica": {
            "port": replica.port,
            "admin_dn": admin_dn,
            "credentials": {"source": "password_file", "secret_file": replica_secret},
            "tls": "none",
        },
        "syncrepl_retry": "1 +",
        **extra,
    }

"""What both LDAP replication modes share: where each server is and how to bind to it (the
password read on every use, carried only inside a masked `Secret`), connecting with TLS and
a small bounded retry, paged reads, and OpenLDAP's change sequence numbers (CSNs).

A password never reaches a log line, an exception, a database row or `--json`: messages
name where it comes from (file or variable), never what it is.
"""

from __future__ import annotations

import math
import os
import re
import ssl
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ldap3 import (  # type: ignore[import-untyped]
    BASE,
    NONE,
    SUBTREE,
    Connection,
    Server,
    Tls,
)
from ldap3.core.exceptions import LDAPException  # type: ignore[import-untyped]

from clustermgr.core.errors import ClusterMgrError
from clustermgr.core.inputs import ADDRESS_RULE, is_host_address
from clustermgr.core.secret import Secret

if TYPE_CHECKING:
    from clustermgr.config import Credentials, LdapSettings

SYNC_CONTROL = "1.3.6.1.4.1.4203.1.9.1.1"  # RFC 4533 content synchronization (syncprov)
MANAGE_DSA_IT = ("2.16.840.1.113730.3.4.2", False, None)  # read glue and referral entries
RETRY_FIRST_DELAY_S = 0.2


class LdapError(ClusterMgrError):
    """An LDAP server refused or failed an operation; the message names the server."""


class LdapConfigError(LdapError):
    """The [ldap] settings (or a password source) cannot work."""

    exit_code = 2


class LdapUnreachable(LdapError):
    """A server did not answer, after the retries; `replica` says which side."""

    def __init__(self, message: str, *, replica: bool):
        super().__init__(message)
        self.replica = replica


@dataclass(frozen=True)
class PasswordSource:
    """Where a bind password comes from: a file's first line or an environment variable."""

    file: Path | None
    env: str | None

    @classmethod
    def of(cls, creds: Credentials) -> PasswordSource:
        if creds.source == "password_file":
            return cls(creds.secret_file, None)
        return cls(None, creds.secret_env)

    def describe(self) -> str:
        return f"file {self.file}" if self.file is not None else f"environment variable {self.env}"

    def read(self, who: str) -> Secret:
        """The password, read now (a rotated file takes effect at the next run)."""
        if self.file is not None:
            try:
                lines = self.file.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise LdapConfigError(f"{who}: password {self.describe()}: {why}") from None
            value = lines[0].strip() if lines else ""
        else:
            value = os.environ.get(self.env or "", "").strip()
        if not value:
            raise LdapConfigError(f"{who}: password {self.describe()} is empty or unset")
        return Secret(value)


@dataclass(frozen=True)
class Endpoint:
    """One LDAP server and how to bind to it."""

    role: str  # "head" or "replica <director>", for messages
    uri: str
    bind_dn: str
    password: PasswordSource
    tls: str  # none, starttls, ldaps
    ca_file: Path | None
    timeout_s: float
    attempts: int

    def describe(self) -> str:
        return f"{self.role} {self.uri}"


def head_endpoint(settings: LdapSettings) -> Endpoint:
    head = settings.head
    return Endpoint(
        role="head",
        uri=head.uri,
        bind_dn=head.bind_dn,
        password=PasswordSource.of(head.credentials),
        tls=head.tls,
        ca_file=head.ca_file,
        timeout_s=settings.timeout_s,
        attempts=settings.retries,
    )


def replica_endpoint(settings: LdapSettings, director: str, address: str) -> Endpoint:
    replica = settings.replica
    scheme = "ldaps" if replica.tls == "ldaps" else "ldap"
    if not is_host_address(address):  # callers pass only checked addresses; never bind to one
        raise LdapError(f"replica {director}: address {address!r} is not {ADDRESS_RULE}")
    host = f"[{address}]" if ":" in address else address
    return Endpoint(
        role=f"replica {director}",
        uri=f"{scheme}://{host}:{replica.port}",
        bind_dn=replica.admin_dn,
        password=PasswordSource.of(replica.credentials),
        tls=replica.tls,
        ca_file=replica.ca_file,
        timeout_s=settings.timeout_s,
        attempts=settings.retries,
    )


def check_passwords(settings: LdapSettings) -> None:
    """Both passwords can be read (LdapConfigError, exit 2, naming the source otherwise)."""
    PasswordSource.of(settings.head.credentials).read("ldap.head")
    PasswordSource.of(settings.replica.credentials).read("ldap.replica")


def connect(endpoint: Endpoint, *, sleep: Any = time.sleep) -> Connection:
    """A bound connection. A server that does not answer is tried `attempts` times with a
    doubling delay, then LdapUnreachable; a refused bind is LdapError at once (no retry)."""
    password = endpoint.password.read(endpoint.describe())
    last = ""
    for attempt in range(endpoint.attempts):
        if attempt:
            sleep(RETRY_FIRST_DELAY_S * 2 ** (attempt - 1))
        conn = _connection(endpoint, password)
        try:
            conn.open()
            if endpoint.tls == "starttls" and not conn.start_tls():
                raise LdapError(f"{endpoint.describe()}: StartTLS refused: {_result(conn)}")
        except LDAPException as exc:
            refused = _certificate_refused(exc)
            if refused is not None:  # not a network hiccup: retrying cannot help
                raise LdapError(
                    f"{endpoint.describe()}: {_tls_advice(endpoint, refused)}"
                ) from None
            last = _one_line(exc)
            continue
        try:
            bound = conn.bind()
        except LDAPException as exc:
            last = _one_line(exc)
            continue
        if not bound:
            conn.unbind()
            raise LdapError(
                f"{endpoint.describe()}: bind as {endpoint.bind_dn} refused: {_result(conn)}"
            )
        return conn
    raise LdapUnreachable(
        f"{endpoint.describe()} unreachable after {endpoint.attempts} attempts: {last}",
        replica=endpoint.role != "head",
    )


def _connection(endpoint: Endpoint, password: Secret) -> Connection:
    tls = None
    if endpoint.tls != "none":
        tls = Tls(
            validate=ssl.CERT_REQUIRED,
            ca_certs_file=str(endpoint.ca_file) if endpoint.ca_file else None,
        )
    server = Server(
        endpoint.uri,
        use_ssl=endpoint.tls == "ldaps",
        tls=tls,
        get_info=NONE,
        connect_timeout=endpoint.timeout_s,
    )
    return Connection(
        server,
        user=endpoint.bind_dn,
        password=password.reveal(),
        receive_timeout=max(1, math.ceil(endpoint.timeout_s)),  # ldap3 packs whole seconds
        raise_exceptions=False,
        read_only=False,
    )


def _certificate_refused(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure under ldap3's wrapping exceptions, if that is
    what happened (found by type along the exception chain, not by message text)."""
    found: ssl.SSLCertVerificationError | None = None
    seen: BaseException | None = exc
    for _ in range(10):  # ldap3's wrappers subclass the ssl error: look for the original
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError):
            found = seen
            if getattr(seen, "verify_message", None):
                break
        seen = seen.__cause__ or seen.__context__
    return found


def _tls_advice(endpoint: Endpoint, refused: ssl.SSLCertVerificationError) -> str:
    trusted = f"the CA in {endpoint.ca_file}" if endpoint.ca_file else "the system's CAs"
    why = getattr(refused, "verify_message", None)  # ldap3 keeps it for StartTLS only
    detail = f" ({why})" if why else ""
    return (
        f"TLS: the server's certificate is not signed by {trusted}{detail}: set ca_file to "
        "the CA that signed it"
    )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _result(conn: Connection) -> str:
    """`description: message` of the connection's last result (the server's own words)."""
    result = conn.result or {}
    message = " ".join(str(result.get("message") or "").split())
    description = result.get("description") or "error"
    return f"{description}: {message}" if message else str(description)


def check(conn: Connection, ok: bool, what: str) -> None:
    """Raise LdapError naming `what` and the server's answer when an operation failed."""
    if not ok:
        raise LdapError(f"{what}: {_result(conn)}")


def result_line(conn: Connection) -> str:
    return _result(conn)


def result_code(conn: Connection) -> int:
    return int((conn.result or {}).get("result", -1))


@dataclass(frozen=True)
class RawEntry:
    """One entry as the server sent it: its DN and attribute values as bytes, attribute
    names as the server spelled them."""

    dn: str
    attributes: dict[str, list[bytes]]

    def value(self, name: str) -> str | None:
        for key, values in self.attributes.items():
            if key.lower() == name.lower() and values:
                return values[0].decode("utf-8", "replace")
        return None


def paged(
    conn: Connection,
    base: str,
    search_filter: str,
    attributes: Sequence[str],
    page_size: int,
    what: str,
) -> Iterator[RawEntry]:
    """Every entry of `base`'s subtree matching the filter, read page by page (RFC 2696).
    A base that does not exist yields nothing."""
    results = conn.extend.standard.paged_search(
        base,
        search_filter,
        SUBTREE,
        attributes=list(attributes),
        paged_size=page_size,
        generator=True,
    )
    try:
        for item in results:
            if item.get("type") == "searchResEntry":
                yield RawEntry(item["dn"], dict(item.get("raw_attributes") or {}))
    except LDAPException as exc:
        raise LdapError(f"{what}: {_one_line(exc)}") from None
    code = result_code(conn)
    if code not in (0, 32):  # 32: noSuchObject, the base is not there (yet)
        raise LdapError(f"{what}: {_result(conn)}")


def read_entry(conn: Connection, dn: str, attributes: Sequence[str]) -> RawEntry | None:
    """One entry by DN (glue entries too), or None when there is none."""
    try:
        conn.search(
            dn, "(objectClass=*)", BASE, attributes=list(attributes), controls=[MANAGE_DSA_IT]
        )
    except LDAPException as exc:
        raise LdapError(f"read {dn}: {_one_line(exc)}") from None
    for item in conn.response or []:
        if item.get("type") == "searchResEntry":
            return RawEntry(item["dn"], dict(item.get("raw_attributes") or {}))
    if result_code(conn) not in (0, 32):
        raise LdapError(f"read {dn}: {_result(conn)}")
    return None


def supports_syncrepl(conn: Connection) -> bool:
    """The server lists the RFC 4533 sync control in its root DSE (OpenLDAP with syncprov)."""
    entry = read_entry(conn, "", ["supportedControl"])
    if entry is None:
        return False
    return any(
        key.lower() == "supportedcontrol" and SYNC_CONTROL.encode() in values
        for key, values in entry.attributes.items()
    )


# CSN: 20240101120000.123456Z#000000#000#000000 (time, count, server id, modifier)
_CSN = re.compile(r"^(\d{14})(?:\.(\d{1,6}))?Z#([0-9a-fA-F]+)#([0-9a-fA-F]+)#([0-9a-fA-F]+)$")


@dataclass(frozen=True, order=True)
class Csn:
    at: datetime
    count: int
    sid: int
    text: str

    @classmethod
    def parse(cls, text: str) -> Csn:
        found = _CSN.match(text.strip())
        if found is None:
            raise ValueError(f"not an OpenLDAP CSN: {text!r}")
        stamp = datetime.strptime(found[1], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        stamp = stamp.replace(microsecond=int((found[2] or "0").ljust(6, "0")))
        return cls(stamp, int(found[3], 16), int(found[4], 16), text.strip())


def parse_csns(values: Sequence[str]) -> dict[int, Csn]:
    """contextCSN values by server id (one per provider in a multi-provider setup)."""
    csns: dict[int, Csn] = {}
    for value in values:
        csn = Csn.parse(value)
        if csn.sid not in csns or csns[csn.sid] < csn:
            csns[csn.sid] = csn
    return csns


def lag_seconds(provider: dict[int, Csn], replica: dict[int, Csn]) -> float | None:
    """How far the replica is behind: for each provider server id, provider time minus the
    replica's time for that id (its newest of any id when it has none for this one), 0 when
    equal or ahead; the largest. None when either side has no CSN yet (nothing to compare)."""
    if not provider or not replica:
        return None
    newest = max(replica.values()).at
    worst = 0.0
    for sid, csn in provider.items():
        mine = replica[sid].at if sid in replica else newest
        worst = max(worst, (csn.at - mine).total_seconds())
    return worst


def csn_text(csns: dict[int, Csn]) -> str | None:
    """The newest CSN of a set, for the record (64 characters at most)."""
    if not csns:
        return None
    return max(csns.values()).text[:64]

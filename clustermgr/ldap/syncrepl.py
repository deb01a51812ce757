"""syncrepl mode: the director's slapd is a read-only RFC 4533 consumer of the head's.

clustermgr does not copy entries in this mode; OpenLDAP does. clustermgr
- configures the consumer through the replica's cn=config: one `olcSyncrepl`
  (refreshAndPersist, retry forever, the configured bases) and an `olcUpdateRef` to the head
  on the database holding the suffix. A database with olcSyncrepl is a *shadow*: slapd
  answers any client's write with a referral to olcUpdateRef and lets only the consumer
  (the database's rootdn) write, so the replica is read-only without `olcReadOnly`, which
  would stop the consumer's own writes too. Idempotent: a consumer already set up as
  wanted is left alone (its connection is not restarted);
- measures the lag: the head's and the replica's `contextCSN` (one CSN per provider
  server id) compared; lag = provider time - replica time, 0 when equal;
- re-seeds a replica whose lag stays above `max_lag_s`. OpenLDAP has no remote "refresh
  now" operation; what it does support is changing olcSyncrepl at run time: slapd stops
  the old consumer task and starts a new one at once, which connects to the head and runs
  a refresh from the cookie it keeps in its contextCSN (syncprov answers with the missed
  changes, or with a full present phase that also removes deleted entries when its session
  log does not reach back that far). Replacing the value with a fresh rid is that restart;
  it also revives a consumer that gave up (its retries ran out, or the head was down).
  Wiping the database instead would need the director's shell (stop slapd, remove the
  files, start it), which clustermgr does not have.

Only the bases are replicated: the consumer's filter keeps the bases' subtrees and their
ancestors (so the suffix entry carries a readable contextCSN and no glue is made), and
only the allow-list of attributes (`attrs=`, `[ldap] attributes`): no password hash
reaches the replica.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from ldap3 import MODIFY_REPLACE, Connection  # type: ignore[import-untyped]
from ldap3.utils.conv import escape_filter_chars  # type: ignore[import-untyped]

from clustermgr.config import LdapSettings
from clustermgr.core.ldap_attrs import effective
from clustermgr.ldap.connection import (
    Endpoint,
    LdapError,
    check,
    csn_text,
    lag_seconds,
    paged,
    parse_csns,
    read_entry,
)

SETTLE_S = 3.0  # a replica behind is watched this long before its lag counts
SETTLE_POLL_S = 0.05
RID_MAX = 999  # rid is at most three decimal digits
_TOKEN = re.compile(r'([A-Za-z][\w-]*)=("(?:[^"\\]|\\.)*"|\S+)')


@dataclass(frozen=True)
class ConsumerChange:
    rid: int
    changed: bool  # cn=config was written (the consumer restarted)
    reseeded: bool


@dataclass(frozen=True)
class Lag:
    provider_csn: str | None
    replica_csn: str | None
    seconds: float | None  # None: a side has no contextCSN yet


@dataclass(frozen=True)
class SyncreplReport:
    consumer: ConsumerChange
    lag: Lag
    entries: int
    reseed_reason: str  # why it was re-seeded; "" when it was not


def filter_for(settings: LdapSettings) -> str:
    """The consumer's filter: the bases' subtrees and their ancestors up to the suffix."""
    suffix_depth = len(_split(settings.suffix))
    if any(_key(base) == _key(settings.suffix) for base in settings.bases):
        return "(objectClass=*)"
    ancestors: dict[str, str] = {}
    for base in settings.bases:
        parts = _split(base)
        for depth in range(suffix_depth, len(parts)):
            dn = ",".join(parts[len(parts) - depth :])
            ancestors.setdefault(_key(dn), dn)
    terms = [f"(entryDN={escape_filter_chars(dn)})" for dn in ancestors.values()]
    terms += [f"(entryDN:dnSubtreeMatch:={escape_filter_chars(b)})" for b in settings.bases]
    return f"(|{''.join(terms)})"


def consumer_settings(settings: LdapSettings, head: Endpoint, password: str) -> dict[str, str]:
    """The olcSyncrepl keywords clustermgr sets (without rid), values unquoted."""
    wanted = {
        "provider": head.uri,
        "bindmethod": "simple",
        "binddn": head.bind_dn,
        "credentials": password,
        "searchbase": settings.suffix,
        "filter": filter_for(settings),
        "scope": "sub",
        # the allow-list only: slapd asks the head for these and stores nothing else
        "attrs": ",".join(effective(settings.attributes)),
        "type": "refreshAndPersist",
        "retry": settings.syncrepl_retry,
        "timeout": str(int(settings.timeout_s)),
        "network-timeout": str(int(settings.timeout_s)),
    }
    if head.tls == "starttls":
        wanted["starttls"] = "critical"
    if head.tls != "none":
        wanted["tls_reqcert"] = "demand"
        if head.ca_file is not None:
            # a path on the director: its slapd reads the CA there (docs/directors.md)
            wanted["tls_cacert"] = str(head.ca_file)
    return wanted


def render(rid: int, wanted: dict[str, str]) -> str:
    quoted = " ".join(f'{key}="{_escape(value)}"' for key, value in wanted.items())
    return f"rid={rid:03d} {quoted}"


def parse_value(value: str) -> dict[str, str]:
    """An olcSyncrepl value as slapd shows it ({0}rid=001 provider=... ) to keywords."""
    text = re.sub(r"^\{\d+\}", "", value.strip())
    found: dict[str, str] = {}
    for key, raw in _TOKEN.findall(text):
        if raw.startswith('"') and raw.endswith('"'):
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        found[key.lower()] = raw
    return found


def database_dn(replica: Connection, suffix: str) -> str:
    """The cn=config entry of the replica's database that holds `suffix`."""
    replica.search(
        "cn=config",
        f"(&(objectClass=olcDatabaseConfig)(olcSuffix={escape_filter_chars(suffix)}))",
        attributes=["olcSuffix"],
    )
    found = [item["dn"] for item in replica.response or [] if item.get("type") == "searchResEntry"]
    if not found:
        raise LdapError(
            f"no database with olcSuffix {suffix} in the replica's cn=config "
            "(is the replica admin DN allowed to read cn=config?)"
        )
    return str(found[0])


def configure(
    replica: Connection,
    settings: LdapSettings,
    head: Endpoint,
    password: str,
    *,
    reseed: bool,
) -> ConsumerChange:
    """Make the replica's database a consumer of the head as configured; with `reseed`,
    restart its consumer under a fresh rid even when nothing else changed."""
    db_dn = database_dn(replica, settings.suffix)
    entry = read_entry(replica, db_dn, ["olcSyncrepl", "olcUpdateRef"])
    values = entry.attributes if entry else {}
    current = [v.decode() for k, vs in values.items() if k.lower() == "olcsyncrepl" for v in vs]
    refs = [v.decode() for k, vs in values.items() if k.lower() == "olcupdateref" for v in vs]
    wanted = consumer_settings(settings, head, password)
    rid = 1
    matches = False
    if len(current) == 1:
        have = parse_value(current[0])
        rid = int(have.get("rid", "1"))
        matches = all(_same(key, have.get(key), value) for key, value in wanted.items())
    if matches and refs == [head.uri] and not reseed:
        return ConsumerChange(rid, changed=False, reseeded=False)
    if reseed:
        rid = rid % RID_MAX + 1
    ok = replica.modify(
        db_dn,
        {
            "olcSyncrepl": [(MODIFY_REPLACE, [render(rid, wanted)])],
            "olcUpdateRef": [(MODIFY_REPLACE, [head.uri])],
        },
    )
    check(replica, ok, f"configure the consumer in {db_dn}")
    return ConsumerChange(rid, changed=True, reseeded=reseed)


def measure(head: Connection, replica: Connection, suffix: str) -> Lag:
    provider = parse_csns(_context_csns(head, suffix))
    mine = parse_csns(_context_csns(replica, suffix))
    return Lag(csn_text(provider), csn_text(mine), lag_seconds(provider, mine))


def settle(
    head: Connection,
    replica: Connection,
    suffix: str,
    *,
    within_s: float = SETTLE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Lag:
    """The lag once the replica caught up, or after `within_s`: a change made a moment ago
    (or a consumer just restarted) is not lag yet."""
    deadline = clock() + within_s
    lag = measure(head, replica, suffix)
    while (lag.seconds is None or lag.seconds > 0) and clock() < deadline:
        sleep(SETTLE_POLL_S)
        lag = measure(head, replica, suffix)
    return lag


def count_entries(replica: Connection, settings: LdapSettings) -> int:
    return sum(
        1
        for base in settings.bases
        for _ in paged(replica, base, "(objectClass=*)", ["1.1"], settings.page_size, "count")
    )


def run(
    head: Connection,
    replica: Connection,
    settings: LdapSettings,
    head_endpoint: Endpoint,
    password: str,
    *,
    reseed: bool = False,
) -> SyncreplReport:
    """Configure (or re-seed) the consumer, wait for it briefly, measure; re-seed once when
    the lag is still above max_lag_s."""
    settle_s = min(SETTLE_S, settings.max_lag_s)
    consumer = configure(replica, settings, head_endpoint, password, reseed=reseed)
    reason = "asked (--full)" if reseed else ""
    lag = settle(head, replica, settings.suffix, within_s=settle_s)
    if not consumer.reseeded and _too_far(lag, settings.max_lag_s):
        reason = lag_text(lag, settings.max_lag_s)
        consumer = configure(replica, settings, head_endpoint, password, reseed=True)
        lag = settle(head, replica, settings.suffix, within_s=settle_s)
    return SyncreplReport(consumer, lag, count_entries(replica, settings), reason)


def _too_far(lag: Lag, max_lag_s: float) -> bool:
    if lag.seconds is None:
        return lag.provider_csn is not None  # the head has changes, the replica nothing
    return lag.seconds > max_lag_s


def lag_text(lag: Lag, max_lag_s: float) -> str:
    if lag.seconds is None:
        return "the replica has no contextCSN (never refreshed)"
    return f"lag {lag.seconds:.1f} s > max_lag_s {max_lag_s:g} s"


def _context_csns(conn: Connection, suffix: str) -> list[str]:
    entry = read_entry(conn, suffix, ["contextCSN"])
    if entry is None:
        return []
    return [
        v.decode() for k, vs in entry.attributes.items() if k.lower() == "contextcsn" for v in vs
    ]


def _same(key: str, have: str | None, want: str) -> bool:
    if have is None:
        return False
    if key == "credentials":
        return have == want
    return " ".join(have.split()).lower() == " ".join(want.split()).lower()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _split(dn: str) -> list[str]:
    return [part.strip() for part in dn.split(",")]


def _key(dn: str) -> str:
    return ",".join(_split(dn)).lower()

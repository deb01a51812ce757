"""pull mode: clustermgr copies the configured bases from the head to the director's slapd
with ldap3, for a head directory that cannot be a syncrepl provider.

- full: every entry of the bases read page by page from both sides; missing entries added
  (parents first), differing ones rewritten, entries the head no longer has deleted
  (children first);
- incremental: the head's entries with modifyTimestamp >= the watermark (the newest
  modifyTimestamp the last run saw, the head's own clock, so no skew; `>=` because the
  stamp has whole seconds: an entry seen twice is compared, not rewritten), plus
  deletions and missing entries found by the difference of the two sides' DN sets (a
  DN-only paged listing, cheap);
- the head always wins: an entry edited on the replica since the last run (its entryCSN,
  the replica's own change stamp, is newer than the one recorded then) that differs from
  the head's is overwritten, and reported as a conflict;
- an entry the replica refuses (a schema the replica lacks, a syntax it rejects) is
  reported with its DN and the server's message while the others sync, and the watermark
  stops before it so the next run tries it again.

Only user attributes are compared and written; operational ones are the servers' own. Of
the head's, only the allow-list (`[ldap] attributes`, never a password hash) is read, and
anything else a replica entry holds is removed when the entry is rewritten; an
incremental run that finds a password attribute on the replica (one synced before the
allow-list) runs as a full one, which rewrites every entry to the allow-list.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ldap3 import (  # type: ignore[import-untyped]
    MODIFY_DELETE,
    MODIFY_REPLACE,
    SUBTREE,
    Connection,
)
from ldap3.core.exceptions import LDAPException  # type: ignore[import-untyped]
from ldap3.utils.conv import escape_filter_chars  # type: ignore[import-untyped]

from clustermgr.config import LdapSettings
from clustermgr.core.ldap_attrs import PASSWORD_ATTRIBUTES, effective
from clustermgr.ldap.connection import (
    LdapError,
    LdapUnreachable,
    RawEntry,
    paged,
    read_entry,
    result_code,
    result_line,
)

REPLICA_ATTRS = ("*", "entryCSN")
OPERATIONAL = frozenset({"modifytimestamp", "entrycsn"})
# result codes of a server (or connection) in trouble: the run stops, nothing per entry
FATAL_CODES = frozenset({-1, 1, 3, 51, 52, 80, 81})


@dataclass(frozen=True)
class EntryFailure:
    dn: str
    message: str  # the server's result and message

    def line(self) -> str:
        return f"{self.dn}: {self.message}"


@dataclass
class PullReport:
    full: bool
    added: int = 0
    modified: int = 0
    deleted: int = 0
    unchanged: int = 0
    entries: int = 0  # on the replica under the bases, after the run
    conflicts: list[str] = field(default_factory=list)  # DNs overwritten by the head's
    failures: list[EntryFailure] = field(default_factory=list)
    watermark: str | None = None  # the head's newest modifyTimestamp synced
    replica_csn: str | None = None  # the replica's newest entryCSN after the run


@dataclass
class _Run:
    head: Connection
    replica: Connection
    settings: LdapSettings
    report: PullReport
    since_csn: str | None  # replica entries with a newer entryCSN were edited there
    failed_stamps: list[str] = field(default_factory=list)
    newest_csn: str | None = None
    last_written: str | None = None  # its entryCSN is the newest of the run's writes

    @property
    def head_attrs(self) -> tuple[str, ...]:
        return head_attributes(self.settings)


def head_attributes(settings: LdapSettings) -> tuple[str, ...]:
    """What is read of the head's entries: the allow-list and the change stamp."""
    return (*effective(settings.attributes), "modifyTimestamp")


def key(dn: str) -> str:
    """A DN for set arithmetic: lower case, no blanks around separators."""
    return ",".join("=".join(p.strip() for p in rdn.split("=", 1)) for rdn in dn.split(",")).lower()


def depth(dn: str) -> int:
    return dn.count(",")


def comparable(entry: RawEntry) -> dict[str, frozenset[bytes]]:
    """User attributes by lower-case name, values as a set."""
    return {
        name.lower(): frozenset(values)
        for name, values in entry.attributes.items()
        if name.lower() not in OPERATIONAL and values
    }


def sync(
    head: Connection,
    replica: Connection,
    settings: LdapSettings,
    *,
    full: bool,
    watermark: str | None,
    since_csn: str | None,
) -> PullReport:
    """One pull run; full when asked, when there is no watermark yet, or when the replica
    holds a password attribute (synced before the allow-list: a full run removes it)."""
    full = full or watermark is None
    run = _Run(head, replica, settings, PullReport(full=full), since_csn, newest_csn=since_csn)
    try:
        if not full and _holds_passwords(replica, settings):
            full = run.report.full = True
        _ensure_ancestors(run)
        if full:
            _full(run)
        else:
            assert watermark is not None
            _incremental(run, watermark)
        if run.last_written is not None:
            written = read_entry(replica, run.last_written, ["entryCSN"])
            _note_csns(run, [written] if written else [])
    except LDAPException as exc:
        side = "the replica" if replica.closed or not head.closed else "the head"
        raise LdapUnreachable(
            f"connection to {side} lost during the pull: {exc}", replica=side == "the replica"
        ) from None
    report = run.report
    stamps = [*run.failed_stamps, *([report.watermark] if report.watermark else [])]
    report.watermark = min(stamps) if stamps else watermark  # refused entries: again next time
    report.replica_csn = run.newest_csn
    return report


def _full(run: _Run) -> None:
    head_entries = _read_all(run.head, run.settings, run.head_attrs, "read the head")
    replica_entries = _read_all(run.replica, run.settings, REPLICA_ATTRS, "read the replica")
    _note_csns(run, replica_entries.values())
    run.report.watermark = _newest_stamp(head_entries.values())
    _apply(run, head_entries, replica_entries)
    stale = [e for k, e in replica_entries.items() if k not in head_entries]
    run.report.conflicts += [e.dn for e in stale if _edited_here(run, e)]
    _delete(run, stale)
    run.report.entries = len(replica_entries) + run.report.added - run.report.deleted


def _incremental(run: _Run, watermark: str) -> None:
    settings = run.settings
    changed = _read_all(
        run.head,
        settings,
        run.head_attrs,
        "read the head's changes",
        f"(modifyTimestamp>={escape_filter_chars(watermark)})",
    )
    head_dns = _list_dns(run.head, settings, "list the head")
    replica_dns = _list_dns(run.replica, settings, "list the replica")
    edited: dict[str, RawEntry] = {}
    if run.since_csn:
        since = escape_filter_chars(run.since_csn)  # read back from the database
        edited = _read_all(
            run.replica,
            settings,
            REPLICA_ATTRS,
            "read the replica's own changes",
            f"(&(entryCSN>={since})(!(entryCSN={since})))",
        )
        _note_csns(run, edited.values())
    run.report.watermark = _newest_stamp(changed.values()) or watermark
    wanted = dict(changed)
    # on the head, not on the replica, not changed: an earlier refusal, or deleted there
    for k in head_dns.keys() - replica_dns.keys() - changed.keys():
        _add_if_found(run.head, head_dns[k], run.head_attrs, wanted)
    # edited on the replica, not changed on the head: compare with the head's version
    for k in edited.keys() & head_dns.keys() - changed.keys():
        _add_if_found(run.head, head_dns[k], run.head_attrs, wanted)
    current: dict[str, RawEntry] = {}
    if len(wanted) > settings.page_size:  # many: one paged read beats one read each
        current = _read_all(run.replica, settings, REPLICA_ATTRS, "read the replica")
    else:
        for k, entry in wanted.items():
            found = edited.get(k)
            if found is None and k in replica_dns:
                found = read_entry(run.replica, entry.dn, REPLICA_ATTRS)
            if found is not None:
                current[k] = found
    _apply(run, wanted, current)
    stale = [RawEntry(dn, {}) for k, dn in replica_dns.items() if k not in head_dns]
    run.report.conflicts += [e.dn for e in stale if key(e.dn) in edited]
    _delete(run, stale)
    run.report.entries = len(replica_dns) + run.report.added - run.report.deleted


def _apply(run: _Run, wanted: dict[str, RawEntry], current: dict[str, RawEntry]) -> None:
    """Add what the replica lacks (parents first), rewrite what differs."""
    for k in sorted(wanted, key=lambda k: depth(k)):
        entry = wanted[k]
        mine = current.get(k)
        if mine is None:
            _write(run, entry, _add(run.replica, entry), "added")
            continue
        theirs, ours = comparable(entry), comparable(mine)
        if theirs == ours:
            run.report.unchanged += 1
            continue
        if _edited_here(run, mine):
            run.report.conflicts.append(entry.dn)
        _write(run, entry, _modify(run.replica, entry.dn, theirs, ours), "modified")


def _edited_here(run: _Run, mine: RawEntry) -> bool:
    """Changed on the replica after the last run wrote to it."""
    return bool(run.since_csn) and (mine.value("entryCSN") or "") > (run.since_csn or "")


def _add(replica: Connection, entry: RawEntry) -> bool:
    attributes = {
        name: values
        for name, values in entry.attributes.items()
        if name.lower() not in OPERATIONAL and values  # an allow-listed name it lacks
    }
    return bool(replica.add(entry.dn, None, attributes))


def _modify(
    replica: Connection,
    dn: str,
    theirs: dict[str, frozenset[bytes]],
    ours: dict[str, frozenset[bytes]],
) -> bool:
    changes: dict[str, list[tuple[str, list[bytes]]]] = {}
    for name, values in theirs.items():
        if ours.get(name) != values:
            changes[name] = [(MODIFY_REPLACE, sorted(values))]
    for name in ours.keys() - theirs.keys():
        changes[name] = [(MODIFY_DELETE, [])]
    return bool(replica.modify(dn, changes))


def _write(run: _Run, entry: RawEntry, ok: bool, counter: str) -> None:
    if ok:
        setattr(run.report, counter, getattr(run.report, counter) + 1)
        run.last_written = entry.dn
        return
    code = result_code(run.replica)
    if code in FATAL_CODES:
        raise LdapUnreachable(
            f"the replica failed writing {entry.dn}: {result_line(run.replica)}", replica=True
        )
    run.report.failures.append(EntryFailure(entry.dn, result_line(run.replica)))
    stamp = entry.value("modifyTimestamp")
    if stamp:
        run.failed_stamps.append(_stamp(stamp))


def _delete(run: _Run, stale: Iterable[RawEntry]) -> None:
    for entry in sorted(stale, key=lambda e: depth(e.dn), reverse=True):
        if run.replica.delete(entry.dn):
            run.report.deleted += 1
        elif result_code(run.replica) != 32:  # gone already
            if result_code(run.replica) in FATAL_CODES:
                raise LdapUnreachable(
                    f"the replica failed deleting {entry.dn}: {result_line(run.replica)}",
                    replica=True,
                )
            run.report.failures.append(EntryFailure(entry.dn, result_line(run.replica)))


def _ensure_ancestors(run: _Run) -> None:
    """Every base and its parents up to the suffix exist on the replica (copied from the
    head), so the bases' entries have somewhere to go."""
    suffix_parts = len(run.settings.suffix.split(","))
    for base in run.settings.bases:
        parts = base.split(",")
        for size in range(suffix_parts, len(parts) + 1):
            dn = ",".join(parts[len(parts) - size :])
            if read_entry(run.replica, dn, ["1.1"]) is not None:
                continue
            entry = read_entry(run.head, dn, run.head_attrs)
            if entry is None:
                raise LdapError(f"{dn} (of base {base}) is not on the head")
            if not _add(run.replica, entry):
                raise LdapError(f"cannot add {dn} to the replica: {result_line(run.replica)}")


def _read_all(
    conn: Connection,
    settings: LdapSettings,
    attributes: tuple[str, ...],
    what: str,
    search_filter: str = "(objectClass=*)",
) -> dict[str, RawEntry]:
    entries: dict[str, RawEntry] = {}
    for base in settings.bases:
        for entry in paged(conn, base, search_filter, attributes, settings.page_size, what):
            entries[key(entry.dn)] = entry
    return entries


def _holds_passwords(replica: Connection, settings: LdapSettings) -> bool:
    """Any entry under the bases on the replica has a password attribute."""
    present = "".join(f"({name}=*)" for name in PASSWORD_ATTRIBUTES)
    for base in settings.bases:
        replica.search(base, f"(|{present})", SUBTREE, attributes=["1.1"], size_limit=1)
        if any(item.get("type") == "searchResEntry" for item in replica.response or []):
            return True
    return False


def _list_dns(conn: Connection, settings: LdapSettings, what: str) -> dict[str, str]:
    """DN key -> DN of every entry under the bases, no attributes (cheap)."""
    found: dict[str, str] = {}
    for base in settings.bases:
        for entry in paged(conn, base, "(objectClass=*)", ["1.1"], settings.page_size, what):
            found[key(entry.dn)] = entry.dn
    return found


def _add_if_found(
    head: Connection, dn: str, attributes: tuple[str, ...], into: dict[str, RawEntry]
) -> None:
    entry = read_entry(head, dn, attributes)
    if entry is not None:
        into[key(entry.dn)] = entry


def _note_csns(run: _Run, entries: Iterable[RawEntry]) -> None:
    for entry in entries:
        csn = entry.value("entryCSN")
        if csn and (run.newest_csn is None or csn > run.newest_csn):
            run.newest_csn = csn


def _newest_stamp(entries: Iterable[RawEntry]) -> str | None:
    stamps = [_stamp(s) for e in entries if (s := e.value("modifyTimestamp"))]
    return max(stamps, default=None)


def _stamp(value: str) -> str:
    """A GeneralizedTime cut to whole seconds (20240101120000Z), comparable as text."""
    return value[:14] + "Z"

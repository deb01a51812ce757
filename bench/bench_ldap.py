"""LDAP replication budgets: syncrepl change visible on the replica within 2 s; pull full sync
of 10,000 entries under 30 s; incremental pull of 10 changes under 1 s.

Two real slapd on loopback ports (tests/services/slapd.py), the real `sync_director` runs
and records into a throwaway SQLite database. Prints each figure with its budget. Not a
pass/fail test; exits 1 only when a run fails (a replica not ok, a change never seen).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from _common import fail, parser
from ldap3 import MODIFY_REPLACE, Connection, Server

from clustermgr.config import LdapSettings
from clustermgr.db.database import Database
from clustermgr.db.models import Provider
from clustermgr.directors.states import ensure
from clustermgr.ldap.sync import DirectorTarget, SyncOutcome, sync_director
from tests.services.slapd import (
    SUFFIX,
    Slapd,
    available,
    directory_ldif,
    ldap_table,
    make_server,
)

SYNCREPL_BUDGET_S = 2.0
FULL_BUDGET_S = 30.0
INCREMENTAL_BUDGET_S = 1.0
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"


def main() -> None:
    args = parser(__doc__).parse_args()
    why = available()
    if why:
        print(f"bench_ldap: skipped: {why}")
        return
    users, groups = (400, 100) if args.quick else (8000, 2000)
    changes = 3 if args.quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        database, director = _database(work)
        servers: list[Slapd] = []
        try:
            _syncrepl(work, database, director, servers, changes)
            _pull(work, database, director, servers, users, groups)
        finally:
            for server in servers:
                server.destroy()


def _syncrepl(
    work: Path, database: Database, director: DirectorTarget, servers: list[Slapd], changes: int
) -> None:
    head = make_server(work / "s-head", provider=True, seed_ldif=directory_ldif(users=100))
    replica = make_server(work / "s-replica")
    servers += [head, replica]
    head.start()
    replica.start()
    settings = _settings(work, head, replica, replica.config_dn, replica.config_password)
    _ok(sync_director(database, settings, director), "syncrepl setup")
    writer = Connection(Server(head.uri), head.admin_dn, head.admin_password, auto_bind=True)
    reader = Connection(Server(replica.uri), auto_bind=True)
    seen: list[float] = []
    for i in range(changes):
        dn = f"uid=user{i:05d},{PEOPLE}"
        value = f"changed {i} {time.time()}"
        start = time.perf_counter()
        writer.modify(dn, {"cn": [(MODIFY_REPLACE, [value])]})
        while True:
            reader.search(dn, "(objectClass=*)", attributes=["cn"])
            if reader.entries and value in reader.entries[0].cn.values:
                break
            if time.perf_counter() - start > 10:
                fail(f"syncrepl: change {i} not on the replica after 10 s")
            time.sleep(0.001)
        seen.append(time.perf_counter() - start)
    lag = _ok(sync_director(database, settings, director), "syncrepl measure").lag_seconds
    _figure(
        f"syncrepl change -> visible on the replica, median of {changes}",
        statistics.median(seen),
        SYNCREPL_BUDGET_S,
        f"max {max(seen) * 1000:.1f} ms; lag reported {lag} s",
    )
    for server in (head, replica):
        server.stop()


def _pull(
    work: Path,
    database: Database,
    director: DirectorTarget,
    servers: list[Slapd],
    users: int,
    groups: int,
) -> None:
    head = make_server(work / "p-head", seed_ldif=directory_ldif(users=users, groups=groups))
    replica = make_server(work / "p-replica")
    servers += [head, replica]
    head.start()
    replica.start()
    settings = _settings(
        work, head, replica, replica.admin_dn, replica.admin_password, page_size=1000
    )
    full = _ok(sync_director(database, settings, director, full=True), "pull full")
    _figure(
        f"pull full sync, {full.added} entries",
        full.duration_s,
        FULL_BUDGET_S,
        f"{full.added / full.duration_s:.0f} entries/s",
    )
    writer = Connection(Server(head.uri), head.admin_dn, head.admin_password, auto_bind=True)
    time.sleep(1.0)  # modifyTimestamp has whole seconds
    for i in range(10):
        writer.modify(f"cn=group{i:05d},{GROUPS}", {"memberUid": [(MODIFY_REPLACE, ["someone"])]})
    incremental = _ok(sync_director(database, settings, director), "pull incremental")
    if incremental.modified != 10:
        fail(f"pull incremental: {incremental.summary()}")
    _figure(
        f"pull incremental sync, 10 changes in {incremental.entries} entries",
        incremental.duration_s,
        INCREMENTAL_BUDGET_S,
        "",
    )


def _database(work: Path) -> tuple[Database, DirectorTarget]:
    database = Database(f"sqlite:///{work / 'cm.db'}")
    database.upgrade()
    with database.session() as session:
        session.add(Provider(name="lab", type="local", region="local", credentials_source="none"))
        session.flush()
        director = ensure(session, "lab", "local", actor="bench")
        director.private_address = "127.0.0.1"
        target = DirectorTarget(director.id, director.name, "127.0.0.1")
    return database, target


def _settings(
    work: Path, head: Slapd, replica: Slapd, admin_dn: str, admin_password: str, **extra: object
) -> LdapSettings:
    table = ldap_table(
        head, replica, work, admin_dn=admin_dn, admin_password=admin_password, **extra
    )
    return LdapSettings.model_validate(table)


def _ok(outcome: SyncOutcome, what: str) -> SyncOutcome:
    if outcome.state != "ok":
        fail(f"{what}: {outcome.summary()}")
    return outcome


def _figure(what: str, seconds: float, budget: float, note: str) -> None:
    verdict = "within budget" if seconds <= budget else "OVER BUDGET"
    extra = f"; {note}" if note else ""
    print(f"{what}: {seconds:.3f} s (budget {budget:g} s, {verdict}{extra})")


if __name__ == "__main__":
    main()

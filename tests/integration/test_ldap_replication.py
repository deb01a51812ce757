"""LDAP replication to a director between two real slapd on loopback ports: syncrepl
(OpenLDAP's own replication, configured through cn=config) and the pull sync."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ldap3 import BASE, MODIFY_REPLACE, Connection, Server
from sqlalchemy import select

from clustermgr.config import LdapSettings
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, LdapReplica
from clustermgr.ldap.sync import DirectorTarget, sync_director
from tests.conftest import run_cli
from tests.services.slapd import (
    SUFFIX,
    Slapd,
    directory_ldif,
    ldap_table,
    user_ldif,
)

HEAD_PASSWORD = "Head-Pw-9b1c7e-never-shown"
REPLICA_PASSWORD = "Replica-Pw-4d2a-never-shown"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
DIRECTOR = "director-lab-local"

Factory = Callable[..., Slapd]


def settings_for(
    tmp_path: Path, head: Slapd, replica: Slapd, *, syncrepl: bool = False, **extra: Any
) -> LdapSettings:
    """syncrepl: the replica's cn=config admin; pull: its database rootdn."""
    admin = (
        (replica.config_dn, replica.config_password)
        if syncrepl
        else (
            replica.admin_dn,
            replica.admin_password,
        )
    )
    extra = {"retries": 3, "timeout_s": 2, **extra}
    return LdapSettings.model_validate(
        ldap_table(head, replica, tmp_path, admin_dn=admin[0], admin_password=admin[1], **extra)
    )


def target(database: Database) -> DirectorTarget:
    from clustermgr.ldap.sync import targets

    with database.session() as session:
        (found,) = targets(session, DIRECTOR)
    return found


def bind(server: Slapd, dn: str | None = None, password: str | None = None) -> Connection:
    return Connection(
        Server(server.uri),
        dn or server.admin_dn,
        password or server.admin_password,
        auto_bind=True,
        raise_exceptions=False,
    )


def add_user(server: Slapd, i: int) -> None:
    conn = bind(server)
    attrs = {}
    for line in user_ldif(i).splitlines()[1:]:
        name, _, value = line.partition(": ")
        attrs.setdefault(name, []).append(value)
    assert conn.add(f"uid=user{i:05d},{PEOPLE}", None, attrs), conn.result
    conn.unbind()


def read(server: Slapd, dn: str, attribute: str = "cn") -> list[str] | None:
    conn = bind(server)
    conn.search(dn, "(objectClass=*)", BASE, attributes=[attribute])
    found = [list(e[attribute].values) for e in conn.entries]
    conn.unbind()
    return found[0] if found else None


def wait_for(predicate: Callable[[], bool], within_s: float = 5.0) -> float:
    start = time.perf_counter()
    while not predicate():
        assert time.perf_counter() - start < within_s, "not within the time"
        time.sleep(0.01)
    return time.perf_counter() - start


def record(database: Database) -> LdapReplica:
    with database.session() as session:
        row = session.scalars(select(LdapReplica)).one()
        session.expunge(row)
        return row


def events(database: Database, kind: str) -> list[ClusterEvent]:
    with database.session() as session:
        rows = list(session.scalars(select(ClusterEvent).filter_by(kind=kind)))
        for row in rows:
            session.expunge(row)
        return rows


# --- syncrepl ------------------------------------------------------------------------------


def test_syncrepl_consumer_configured_change_visible_and_lag_reported(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd(
        "head",
        provider=True,
        admin_password=HEAD_PASSWORD,
        seed_ldif=directory_ldif(users=20, groups=20),
    )
    replica = slapd("replica")
    settings = settings_for(tmp_path, head, replica, syncrepl=True)

    first = sync_director(database, settings, target(database))
    assert (first.mode, first.state, first.error) == ("syncrepl", "ok", "")
    assert first.configured and first.lag_seconds == 0.0 and first.entries == 42
    assert first.provider_csn == first.replica_csn is not None

    add_user(head, 500)
    took = wait_for(lambda: read(replica, f"uid=user00500,{PEOPLE}") is not None, 2.0)
    assert took < 2.0

    again = sync_director(database, settings, target(database))
    assert again.state == "ok" and not again.configured  # idempotent: left alone
    assert again.lag_seconds == 0.0 and again.entries == 43
    row = record(database)
    assert (row.mode, row.state, row.entries, row.lag_seconds) == ("syncrepl", "ok", 43, 0.0)
    assert row.last_success_at is not None and row.provider_csn == row.replica_csn

    # a password set on the head never reaches the replica (the allow-list), the change
    # beside it does; a read-only replica: a client's write is refused
    user = f"uid=user00001,{PEOPLE}"
    assert bind(head).modify(
        user,
        {"userPassword": [(MODIFY_REPLACE, ["user-pw"])], "cn": [(MODIFY_REPLACE, ["Pw Set"])]},
    )
    wait_for(lambda: read(replica, user) == ["Pw Set"])
    assert read(replica, user, "userPassword") == []
    client = Connection(Server(replica.uri), auto_bind=True, raise_exceptions=False)
    client.modify(user, {"cn": [(MODIFY_REPLACE, ["x"])]})
    assert client.result["result"] in (8, 10, 50), client.result  # needs a bind, or referral
    client.unbind()


def test_syncrepl_replica_stopped_and_restarted_catches_up(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd(
        "head", provider=True, admin_password=HEAD_PASSWORD, seed_ldif=directory_ldif(users=5)
    )
    replica = slapd("replica")
    settings = settings_for(tmp_path, head, replica, syncrepl=True)
    assert sync_director(database, settings, target(database)).state == "ok"

    replica.stop()
    for i in range(100, 105):
        add_user(head, i)
    down = sync_director(database, settings, target(database))
    assert down.state == "unreachable"
    assert f"replica {DIRECTOR} ldap://127.0.0.1:{replica.port} unreachable after 3" in down.error
    assert record(database).state == "unreachable"

    replica.start()  # its consumer (in cn=config) reconnects and refreshes
    wait_for(lambda: read(replica, f"uid=user00104,{PEOPLE}") is not None)
    back = sync_director(database, settings, target(database))
    assert back.state == "ok" and back.lag_seconds == 0.0 and back.entries == 12


def test_syncrepl_consumer_that_gave_up_is_reseeded(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd(
        "head", provider=True, admin_password=HEAD_PASSWORD, seed_ldif=directory_ldif(users=3)
    )
    replica = slapd("replica")
    # the consumer retries once a second, twice, then gives up: a stuck replica
    settings = settings_for(
        tmp_path, head, replica, syncrepl=True, syncrepl_retry="1 2", max_lag_s=1
    )
    assert sync_director(database, settings, target(database)).state == "ok"
    rid_before = _rid(replica)

    head.stop()
    time.sleep(3.5)
    head.start()
    add_user(head, 300)
    time.sleep(0.3)
    assert read(replica, f"uid=user00300,{PEOPLE}") is None  # stuck

    outcome = sync_director(database, settings, target(database))
    assert outcome.state == "ok", outcome.summary()
    assert outcome.reseeded.startswith("lag ") and "max_lag_s 1 s" in outcome.reseeded
    assert read(replica, f"uid=user00300,{PEOPLE}") is not None
    assert _rid(replica) == rid_before + 1
    assert len(events(database, "ldap-reseed")) == 1

    forced = sync_director(database, settings, target(database), full=True)  # --full
    assert forced.state == "ok" and forced.reseeded == "asked (--full)"
    assert _rid(replica) == rid_before + 2


def _rid(replica: Slapd) -> int:
    conn = bind(replica, replica.config_dn, replica.config_password)
    conn.search("olcDatabase={1}mdb,cn=config", "(objectClass=*)", BASE, attributes=["olcSyncrepl"])
    value = str(conn.entries[0].olcSyncrepl.values[0])
    conn.unbind()
    return int(value.split("rid=", 1)[1].split()[0])


# --- pull ----------------------------------------------------------------------------------


def test_pull_full_sync_of_10000_then_incremental_of_10(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd(
        "head", admin_password=HEAD_PASSWORD, seed_ldif=directory_ldif(users=8000, groups=2000)
    )
    replica = slapd("replica", admin_password=REPLICA_PASSWORD)  # empty: no suffix entry even
    settings = settings_for(tmp_path, head, replica, page_size=1000)

    full = sync_director(database, settings, target(database))
    assert (full.mode, full.state, full.full) == ("pull", "ok", True), full.summary()
    assert full.added == 10000 and full.entries == 10002  # and the two ou entries
    assert read(replica, f"uid=user07999,{PEOPLE}", "uidNumber") == [17999]
    row = record(database)
    assert row.state == "ok" and row.watermark and row.last_full_at and row.replica_csn

    time.sleep(1.0)  # the head's modifyTimestamp has whole seconds
    conn = bind(head)
    for i in range(5):
        assert conn.modify(
            f"uid=user{i:05d},{PEOPLE}", {"cn": [(MODIFY_REPLACE, [f"Renamed {i}"])]}
        )
    conn.unbind()
    for i in range(5):
        add_user(head, 9000 + i)
    incremental = sync_director(database, settings, target(database))
    assert incremental.state == "ok" and not incremental.full, incremental.summary()
    assert (incremental.added, incremental.modified, incremental.deleted) == (5, 5, 0)
    assert incremental.entries == 10007  # its time: bench/bench_ldap.py, not a pass/fail
    assert read(replica, f"uid=user00004,{PEOPLE}") == ["Renamed 4"]


def test_pull_deletion_and_conflicting_edit_on_the_replica(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd(
        "head", admin_password=HEAD_PASSWORD, seed_ldif=directory_ldif(users=10, groups=10)
    )
    replica = slapd("replica", admin_password=REPLICA_PASSWORD, seed_ldif=directory_ldif())
    settings = settings_for(tmp_path, head, replica)
    assert sync_director(database, settings, target(database)).state == "ok"

    assert bind(head).delete(f"cn=group00003,{GROUPS}")
    local = bind(replica)
    assert local.modify(
        f"uid=user00002,{PEOPLE}", {"cn": [(MODIFY_REPLACE, ["edited on the replica"])]}
    )
    assert local.add(f"cn=stray,{GROUPS}", ["posixGroup"], {"cn": "stray", "gidNumber": 1})

    outcome = sync_director(database, settings, target(database))
    assert outcome.state == "ok" and not outcome.full, outcome.summary()
    assert outcome.deleted == 2 and outcome.modified == 1
    assert read(replica, f"cn=group00003,{GROUPS}") is None
    assert read(replica, f"cn=stray,{GROUPS}") is None
    assert read(replica, f"uid=user00002,{PEOPLE}") == ["User 2"]
    assert sorted(outcome.conflicts) == sorted([f"uid=user00002,{PEOPLE}", f"cn=stray,{GROUPS}"])
    messages = [e.message for e in events(database, "ldap-conflict")]
    assert any(m.startswith(f"uid=user00002,{PEOPLE} was changed on the replica") for m in messages)

    quiet = sync_director(database, settings, target(database))  # nothing new: no conflict
    assert quiet.state == "ok" and not quiet.conflicts and quiet.modified == 0
    assert (quiet.added, quiet.deleted) == (0, 0)


def test_pull_schema_violation_on_one_entry_reported_while_others_sync(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    # the head knows misc.schema (inetLocalMailRecipient); the director's slapd does not
    head = slapd(
        "head",
        admin_password=HEAD_PASSWORD,
        seed_ldif=directory_ldif(users=5, groups=5),
        extra_schemas=("misc",),
    )
    replica = slapd("replica", admin_password=REPLICA_PASSWORD)
    conn = bind(head)
    bad = f"uid=mailer,{PEOPLE}"
    assert conn.add(
        bad,
        ["inetOrgPerson", "inetLocalMailRecipient"],
        {"uid": "mailer", "cn": "m", "sn": "m", "mailLocalAddress": "m@example.org"},
    ), conn.result
    settings = settings_for(tmp_path, head, replica)

    outcome = sync_director(database, settings, target(database))
    assert outcome.state == "lagging" and outcome.added == 10, outcome.summary()
    assert [f.dn for f in outcome.failures] == [bad]
    assert outcome.error.startswith(f"1 entry not applied: {bad}: ")
    # the allow-list leaves mailLocalAddress behind; the class itself is what it lacks
    assert "objectClass: value #1 invalid per syntax" in outcome.error
    assert read(replica, f"uid=user00004,{PEOPLE}") == ["User 4"]
    row = record(database)
    assert row.state == "lagging" and row.error == outcome.error and row.last_success_at is None

    again = sync_director(database, settings, target(database))  # tried again, same answer
    assert [f.dn for f in again.failures] == [bad] and again.added == 0


def test_pull_unreachable_replica_retried_and_status_says_so(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd("head", admin_password=HEAD_PASSWORD, seed_ldif=directory_ldif(users=3))
    replica = slapd("replica", admin_password=REPLICA_PASSWORD)
    settings = settings_for(tmp_path, head, replica)
    replica.stop()

    start = time.perf_counter()
    outcome = sync_director(database, settings, target(database))
    assert time.perf_counter() - start >= 0.6  # 0.2 s + 0.4 s between the three attempts
    assert outcome.state == "unreachable"
    assert outcome.error.startswith(
        f"replica {DIRECTOR} ldap://127.0.0.1:{replica.port} unreachable after 3 attempts: "
    )
    assert "\n" not in outcome.error
    row = record(database)
    assert (row.state, row.error, row.last_success_at) == ("unreachable", outcome.error, None)

    replica.start()
    assert sync_director(database, settings, target(database)).state == "ok"
    assert record(database).state == "ok"


# --- CLI -----------------------------------------------------------------------------------


def _config(tmp_path: Path, head: Slapd, replica: Slapd) -> Path:
    (tmp_path / "head.secret").write_text(HEAD_PASSWORD + "\n")
    config = tmp_path / "clustermgr.toml"
    config.write_text(
        f"""
[[providers]]
name = "lab"
type = "local"
region = "local"

[ldap]
mode = "pull"
suffix = "{SUFFIX}"
bases = ["{PEOPLE}", "{GROUPS}"]
timeout_s = 2

[ldap.head]
uri = "{head.uri}"
bind_dn = "{head.admin_dn}"
credentials = {{ source = "password_file", secret_file = "{tmp_path / "head.secret"}" }}
tls = "none"

[ldap.replica]
port = {replica.port}
admin_dn = "{replica.admin_dn}"
credentials = {{ source = "password_env", secret_env = "TEST_LDAP_REPLICA_PW" }}
tls = "none"
"""
    )
    return config


def test_cli_ldap_sync_and_status_json_never_show_a_password(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd("head", admin_password=HEAD_PASSWORD, seed_ldif=directory_ldif(users=4, groups=4))
    replica = slapd("replica", admin_password=REPLICA_PASSWORD)
    config = _config(tmp_path, head, replica)
    url = f"sqlite:///{tmp_path / 'cm.db'}"
    env = {"TEST_LDAP_REPLICA_PW": REPLICA_PASSWORD}
    base = ("--config", str(config), "--db", url)
    outputs: list[str] = []

    done = run_cli(*base, "--debug", "ldap", "sync", "--json", env=env)
    outputs += [done.stdout, done.stderr]
    assert done.returncode == 0, done.stderr
    (synced,) = json.loads(done.stdout)
    assert (synced["director"], synced["mode"], synced["state"]) == (DIRECTOR, "pull", "ok")
    assert synced["added"] == 8 and synced["entries"] == 10

    done = run_cli(*base, "ldap", "sync", "--director", DIRECTOR, "--full", env=env)
    outputs += [done.stdout, done.stderr]
    assert done.returncode == 0 and done.stdout.startswith(f"{DIRECTOR}: pull ok, full: +0 ~0 -0")

    done = run_cli(*base, "ldap", "status", "--json")
    outputs += [done.stdout, done.stderr]
    (status,) = json.loads(done.stdout)
    assert (status["director"], status["mode"], status["state"], status["entries"]) == (
        DIRECTOR,
        "pull",
        "ok",
        10,
    )
    assert status["last_success"] and status["error"] == ""
    table = run_cli(*base, "ldap", "status")
    assert table.returncode == 0 and DIRECTOR in table.stdout and "LAST SUCCESS" in table.stdout

    # a wrong password: refused, the message names the source, never a value
    wrong = run_cli(*base, "--debug", "ldap", "sync", env={"TEST_LDAP_REPLICA_PW": "Wrong-Pw-1x"})
    outputs += [wrong.stdout, wrong.stderr]
    assert wrong.returncode == 1 and "bind as cn=admin,dc=example,dc=org refused" in wrong.stdout
    replica.stop()
    down = run_cli(*base, "--debug", "ldap", "sync", "--json", env=env)
    outputs += [down.stdout, down.stderr]
    assert down.returncode == 1 and json.loads(down.stdout)[0]["state"] == "unreachable"
    done = run_cli(*base, "ldap", "status", "--json")
    outputs.append(done.stdout)
    assert json.loads(done.stdout)[0]["state"] == "unreachable"

    stored = (tmp_path / "cm.db").read_bytes()
    for secret in (HEAD_PASSWORD, REPLICA_PASSWORD, "Wrong-Pw-1x"):
        assert all(secret not in text for text in outputs), secret
        assert secret.encode() not in stored


def test_cli_ldap_bad_input_is_one_line_and_exit_2(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd("head", admin_password=HEAD_PASSWORD, seed_ldif=directory_ldif())
    replica = slapd("replica", admin_password=REPLICA_PASSWORD)
    config = _config(tmp_path, head, replica)
    url = f"sqlite:///{tmp_path / 'cm.db'}"
    env = {"TEST_LDAP_REPLICA_PW": REPLICA_PASSWORD}
    unknown = run_cli(
        "--config", str(config), "--db", url, "ldap", "sync", "--director", "nope", env=env
    )
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "clustermgr: error: no director named 'nope' (clustermgr ldap status lists them)"
    ]
    bare = tmp_path / "bare.toml"
    bare.write_text("[cluster]\nname = 'c'\n")
    off = run_cli("--config", str(bare), "--db", url, "ldap", "sync")
    assert off.returncode == 2 and len(off.stderr.strip().splitlines()) == 1
    assert "no [ldap] table" in off.stderr
    unset = run_cli("--config", str(config), "--db", url, "ldap", "sync")
    assert unset.returncode == 2
    assert unset.stderr.strip().splitlines() == [
        "clustermgr: error: ldap.replica: password environment variable TEST_LDAP_REPLICA_PW "
        "is empty or unset"
    ]

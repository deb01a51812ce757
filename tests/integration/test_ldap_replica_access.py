"""What a job on a burst node can read from its director's LDAP replica (issue 33 item 5):
the replica is the local provider's director slapd (its config and access rules from
providers/local/director.py), filled by each replication mode from a real head slapd
whose users carry password hashes and attributes outside the allow-list. Anonymous and
node-account searches get the allow-list and no hash; nobody but the replica's rootdn
writes; the head's replicator account, under the head-side rules docs/directors.md gives,
reads no hash and still replicates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ldap3 import BASE, MODIFY_REPLACE, SUBTREE, Connection, Server

from clustermgr.config import LdapSettings
from clustermgr.core.ldap_attrs import DEFAULT_REPLICA_ATTRIBUTES
from clustermgr.db.database import Database
from clustermgr.ldap.sync import sync_director
from tests.integration.test_ldap_replication import DIRECTOR, PEOPLE, Factory, target
from tests.services.slapd import (
    ADMIN_PASSWORD,
    CONFIG_DN,
    REPLICATOR_DN,
    REPLICATOR_PASSWORD,
    SUFFIX,
    Slapd,
    directory_ldif,
    ldap_table,
)

HASH = "{SSHA}c2VjcmV0LWhhc2gtbmV2ZXItb24tYS1ub2Rl"
ALLOWED = {name.lower() for name in DEFAULT_REPLICA_ATTRIBUTES}
NODE_DN = f"cn=node,{SUFFIX}"  # an account a site made on the replica for its nodes
NODE_PASSWORD = "node-account-pw"


def head_ldif(users: int = 4) -> str:
    """Users with a hash, a mail address (outside the allow-list) and shadow expiry."""
    text = directory_ldif(users=users, groups=users)
    text = text.replace(
        "objectClass: posixAccount\n", "objectClass: posixAccount\nobjectClass: shadowAccount\n"
    )
    return text.replace(
        "loginShell: /bin/bash\n",
        f"loginShell: /bin/bash\nuserPassword: {HASH}\nmail: someone@example.org\n"
        "shadowExpire: 20500\nshadowLastChange: 19000\n",
    )


def settings_for(
    tmp_path: Path, head: Slapd, replica: Slapd, mode: str, *, replicator: bool
) -> LdapSettings:
    admin = CONFIG_DN if mode == "syncrepl" else replica.admin_dn
    table: dict[str, Any] = ldap_table(
        head, replica, tmp_path, admin_dn=admin, admin_password=ADMIN_PASSWORD, mode=mode
    )
    table |= {"retries": 3, "timeout_s": 2}
    if replicator:
        secret = tmp_path / "replicator.secret"
        secret.write_text(REPLICATOR_PASSWORD + "\n")
        table["head"]["bind_dn"] = REPLICATOR_DN
        table["head"]["credentials"]["secret_file"] = secret
    return LdapSettings.model_validate(table)


def connect(server: Slapd, dn: str | None = None, password: str | None = None) -> Connection:
    return Connection(Server(server.uri), dn, password, auto_bind=True, raise_exceptions=False)


def everything(conn: Connection, search_filter: str = "(objectClass=*)") -> dict[str, Any]:
    """Every entry of the suffix a connection may see, with all it may read (user and
    operational attributes): DN -> {lower-case attribute name: values}."""
    conn.search(SUFFIX, search_filter, SUBTREE, attributes=["*", "+"])
    return {
        item["dn"]: {name.lower(): values for name, values in item["raw_attributes"].items()}
        for item in conn.response or []
        if item.get("type") == "searchResEntry"
    }


def assert_serves_only_the_allow_list(conn: Connection) -> None:
    seen = everything(conn)
    users = [dn for dn in seen if dn.endswith(PEOPLE) and dn.startswith("uid=")]
    assert len(users) == 4, sorted(seen)  # the node still finds its users
    alice = seen[f"uid=user00001,{PEOPLE}"]
    assert alice["uidnumber"] == [b"10001"] and alice["shadowexpire"] == [b"20500"]
    for dn, attributes in seen.items():
        assert "userpassword" not in attributes, dn
        assert set(attributes) <= ALLOWED, (dn, sorted(set(attributes) - ALLOWED))
    assert everything(conn, "(userPassword=*)") == {}  # not even by a filter
    assert everything(conn, "(mail=someone@example.org)") == {}


@pytest.mark.parametrize("mode", ["pull", "syncrepl"])
def test_anonymous_and_node_searches_on_the_replica_get_no_hash(
    mode: str, slapd: Factory, database: Database, tmp_path: Path
) -> None:
    # bound as the head's rootdn, which reads every hash: the allow-list alone keeps them off
    head = slapd("head", provider=mode == "syncrepl", seed_ldif=head_ldif())
    replica = slapd("replica", director=True)
    settings = settings_for(tmp_path, head, replica, mode, replicator=False)
    assert connect(head, head.admin_dn, head.admin_password).search(
        f"uid=user00001,{PEOPLE}", f"(userPassword={HASH})", BASE
    )  # the head holds the hash

    outcome = sync_director(database, settings, target(database))
    assert (outcome.mode, outcome.state) == (mode, "ok"), outcome.summary()

    root = connect(replica, replica.admin_dn, replica.admin_password)
    stored = everything(root)
    assert all("userpassword" not in a and "mail" not in a for a in stored.values())
    clients = [connect(replica)]  # anonymous, as nslcd on a node reads
    if mode == "pull":  # a syncrepl shadow holds only what its consumer writes
        assert root.add(
            NODE_DN,
            ["organizationalRole", "simpleSecurityObject"],
            {"cn": "node", "userPassword": NODE_PASSWORD},
        ), root.result
        clients.append(connect(replica, NODE_DN, NODE_PASSWORD))  # its bind works (auth)
    for conn in clients:
        assert_serves_only_the_allow_list(conn)
        # no client writes: anonymous needs a bind, the node account has no write right
        # (a syncrepl shadow may answer with a referral to the head)
        conn.modify(f"uid=user00001,{PEOPLE}", {"loginShell": [(MODIFY_REPLACE, ["/bin/evil"])]})
        assert conn.result["result"] in (8, 10, 50), conn.result
        conn.delete(f"cn=group00001,ou=groups,{SUFFIX}")
        assert conn.result["result"] in (8, 10, 50), conn.result
        assert NODE_PASSWORD.encode() not in repr(everything(conn)).encode()
    # clustermgr's cn=config admin reads the operational attributes, and no hash either
    config_admin = connect(replica, CONFIG_DN, ADMIN_PASSWORD)
    assert all("userpassword" not in a for a in everything(config_admin).values())
    kept = everything(root)[f"uid=user00001,{PEOPLE}"]
    assert kept["loginshell"] == [b"/bin/bash"]
    for conn in (root, config_admin, *clients):
        conn.unbind()


@pytest.mark.parametrize("mode", ["pull", "syncrepl"])
def test_the_replicator_reads_no_hash_on_the_head_and_still_replicates(
    mode: str, slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd("head", provider=mode == "syncrepl", seed_ldif=head_ldif(), replicator=True)
    replica = slapd("replica", director=True)
    user = f"uid=user00002,{PEOPLE}"

    replicator = connect(head, REPLICATOR_DN, REPLICATOR_PASSWORD)
    replicator.search(user, "(objectClass=*)", BASE, attributes=["*", "+"])
    (entry,) = replicator.response
    names = {name.lower() for name in entry["raw_attributes"]}
    assert "userpassword" not in names and {"uidnumber", "entrycsn"} <= names
    replicator.unbind()
    admin = connect(head, head.admin_dn, head.admin_password)
    admin.search(user, "(objectClass=*)", BASE, attributes=["userPassword"])
    assert admin.response[0]["raw_attributes"]["userPassword"] == [HASH.encode()]
    admin.unbind()

    settings = settings_for(tmp_path, head, replica, mode, replicator=True)
    outcome = sync_director(database, settings, target(database))
    assert (outcome.director, outcome.state) == (DIRECTOR, "ok"), outcome.summary()
    anonymous = connect(replica)
    assert_serves_only_the_allow_list(anonymous)
    anonymous.unbind()


def test_a_pull_replica_synced_before_the_allow_list_loses_its_hashes(
    slapd: Factory, database: Database, tmp_path: Path
) -> None:
    head = slapd("head", seed_ldif=head_ldif())
    replica = slapd("replica", director=True)
    settings = settings_for(tmp_path, head, replica, "pull", replicator=False)
    assert sync_director(database, settings, target(database)).state == "ok"
    # what a pull of every attribute (the old HEAD_ATTRS = "*") left on the replica
    root = connect(replica, replica.admin_dn, replica.admin_password)
    old = f"uid=user00003,{PEOPLE}"
    assert root.modify(old, {"userPassword": [(MODIFY_REPLACE, [HASH])]}), root.result
    assert root.modify(old, {"mail": [(MODIFY_REPLACE, ["someone@example.org"])]})
    anonymous = connect(replica)  # the replica's rules hide them until then
    assert_serves_only_the_allow_list(anonymous)
    anonymous.unbind()

    outcome = sync_director(database, settings, target(database))  # incremental by watermark
    assert outcome.state == "ok" and outcome.full, outcome.summary()
    assert outcome.modified == 1
    stored = everything(root)[old]
    assert "userpassword" not in stored and "mail" not in stored
    assert stored["uid"] == [b"user00003"]
    root.unbind()

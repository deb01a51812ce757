"""LDAP replication over TLS with a configured CA, against real slapd servers that offer
StartTLS and ldaps with a throwaway CA's certificate: the pull sync (head by StartTLS,
replica by ldaps), syncrepl (the consumer reaches the head by StartTLS with the CA, and the
lag check reads both sides over TLS), and a wrong CA refused in one line."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from clustermgr.config import LdapSettings
from clustermgr.db.database import Database
from clustermgr.ldap.sync import DirectorTarget, sync_director, targets
from tests.services.slapd import (
    Slapd,
    TlsFiles,
    directory_ldif,
    ldap_table,
    make_tls,
)

pytestmark = pytest.mark.integration

DIRECTOR = "director-lab-local"
Factory = Callable[..., Slapd]


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return make_tls(tmp_path / "tls")


@pytest.fixture
def slapd(slapd: Factory, tls: TlsFiles) -> Factory:
    """The shared factory (tests/integration/conftest.py), every server with this CA's TLS."""
    return functools.partial(slapd, tls=tls)


def target(database: Database) -> DirectorTarget:
    with database.session() as session:
        (found,) = targets(session, DIRECTOR)
    return found


def tls_settings(
    tmp_path: Path,
    head: Slapd,
    replica: Slapd,
    ca_file: Path,
    *,
    syncrepl: bool,
    replica_ca: Path | None = None,
) -> LdapSettings:
    """Head by StartTLS on its ldap:// port, replica by ldaps on its second port."""
    admin = (
        (replica.config_dn, replica.config_password)
        if syncrepl
        else (replica.admin_dn, replica.admin_password)
    )
    table = ldap_table(head, replica, tmp_path, admin_dn=admin[0], admin_password=admin[1])
    table["mode"] = "syncrepl" if syncrepl else "pull"
    table["retries"], table["timeout_s"] = 2, 2
    table["head"].update(tls="starttls", ca_file=str(ca_file))
    replica_ca = replica_ca or ca_file
    table["replica"].update(tls="ldaps", ca_file=str(replica_ca), port=replica.ldaps_port)
    return LdapSettings.model_validate(table)


def test_pull_sync_over_starttls_and_ldaps_with_the_ca(
    slapd: Factory, database: Database, tmp_path: Path, tls: TlsFiles
) -> None:
    head = slapd("head", seed_ldif=directory_ldif(users=5, groups=2))
    replica = slapd("replica")
    settings = tls_settings(tmp_path, head, replica, tls.ca_file, syncrepl=False)
    outcome = sync_director(database, settings, target(database))
    assert (outcome.mode, outcome.state, outcome.error) == ("pull", "ok", "")
    assert outcome.entries == 9  # 5 users, 2 groups, the two ou entries


def test_syncrepl_over_tls_and_its_lag_check(
    slapd: Factory, database: Database, tmp_path: Path, tls: TlsFiles
) -> None:
    head = slapd("head", provider=True, seed_ldif=directory_ldif(users=3))
    replica = slapd("replica")
    settings = tls_settings(tmp_path, head, replica, tls.ca_file, syncrepl=True)
    outcome = sync_director(database, settings, target(database))
    for _ in range(50):  # the consumer's first refresh (over StartTLS to the head)
        if outcome.state == "ok":
            break
        outcome = sync_director(database, settings, target(database))
    assert (outcome.mode, outcome.state) == ("syncrepl", "ok"), outcome.error
    assert outcome.lag_seconds == 0


@pytest.mark.parametrize("side", ["head", "replica"])
def test_a_wrong_ca_is_one_line(
    slapd: Factory, database: Database, tmp_path: Path, side: str
) -> None:
    head = slapd("head", seed_ldif=directory_ldif(users=1))
    replica = slapd("replica")
    other = make_tls(tmp_path / "other-ca").ca_file  # a CA that signed neither server
    good = tmp_path / "tls" / "ca.pem"
    head_ca, replica_ca = (other, good) if side == "head" else (good, other)
    settings = tls_settings(tmp_path, head, replica, head_ca, syncrepl=False, replica_ca=replica_ca)
    outcome = sync_director(database, settings, target(database))
    assert outcome.state == "failed"  # not "unreachable": it answered, and was not retried
    where = head.uri if side == "head" else f"ldaps://127.0.0.1:{replica.ldaps_port}"
    who = "head" if side == "head" else f"replica {DIRECTOR}"
    assert "\n" not in outcome.error
    assert outcome.error.startswith(
        f"{who} {where}: TLS: the server's certificate is not signed by the CA in {other}"
    )
    assert outcome.error.endswith(": set ca_file to the CA that signed it")

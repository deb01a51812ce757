"""The pure parts of LDAP replication: CSNs and lag, the consumer's filter and value, the
[ldap] settings, password sources (never shown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.config import parse_settings
from clustermgr.core.errors import ConfigError
from clustermgr.core.ldap_attrs import effective, is_password_attribute, replica_access_rules
from clustermgr.ldap.connection import (
    Csn,
    LdapConfigError,
    PasswordSource,
    head_endpoint,
    lag_seconds,
    parse_csns,
    replica_endpoint,
)
from clustermgr.ldap.pull import head_attributes, key
from clustermgr.ldap.syncrepl import (
    consumer_settings,
    filter_for,
    parse_value,
    render,
)

SUFFIX = "dc=example,dc=org"


def ldap_table(**overrides: object) -> dict[str, object]:
    table: dict[str, object] = {
        "suffix": SUFFIX,
        "bases": [f"ou=people,{SUFFIX}", f"ou=sudoers,ou=services,{SUFFIX}"],
        "head": {
            "uri": "ldap://head:389",
            "bind_dn": f"cn=replicator,{SUFFIX}",
            "credentials": {"source": "password_env", "secret_env": "HEAD_PW"},
        },
        "replica": {
            "admin_dn": "cn=admin,cn=config",
            "credentials": {"source": "password_file", "secret_file": "/etc/clustermgr/r.secret"},
        },
    }
    table.update(overrides)
    return table


def test_csn_parse_and_lag() -> None:
    head = parse_csns(
        ["20261123100010.500000Z#000000#000#000000", "20261123100000.000000Z#000002#001#000000"]
    )
    assert set(head) == {0, 1} and head[0].at.microsecond == 500000
    same = lag_seconds(head, head)
    assert same == 0.0
    behind = parse_csns(
        ["20261123100000.250000Z#000000#000#000000", "20261123100000.000000Z#000002#001#000000"]
    )
    assert lag_seconds(head, behind) == pytest.approx(10.25)
    assert lag_seconds(behind, head) == 0.0  # a replica ahead is not behind
    assert lag_seconds({}, behind) is None and lag_seconds(head, {}) is None
    with pytest.raises(ValueError, match="not an OpenLDAP CSN"):
        Csn.parse("yesterday")


def test_consumer_filter_keeps_the_bases_and_their_ancestors() -> None:
    settings = parse_settings({"ldap": ldap_table()}).ldap
    assert settings is not None
    assert filter_for(settings) == (
        f"(|(entryDN={SUFFIX})(entryDN=ou=services,{SUFFIX})"
        f"(entryDN:dnSubtreeMatch:=ou=people,{SUFFIX})"
        f"(entryDN:dnSubtreeMatch:=ou=sudoers,ou=services,{SUFFIX}))"
    )
    whole = parse_settings({"ldap": ldap_table(bases=[SUFFIX])}).ldap
    assert whole is not None and filter_for(whole) == "(objectClass=*)"


def test_consumer_value_round_trips_through_slapds_spelling() -> None:
    settings = parse_settings({"ldap": ldap_table()}).ldap
    assert settings is not None
    wanted = consumer_settings(settings, head_endpoint(settings), 'pa"ss word')
    value = render(7, wanted)
    assert value.startswith("rid=007 provider=")
    back = parse_value("{0}" + value + " keepalive=0:0:0 syncdata=default")
    assert back["rid"] == "007" and back["credentials"] == 'pa"ss word'
    assert {k: back[k] for k in wanted} == wanted
    assert back["type"] == "refreshAndPersist" and back["retry"] == "5 +"


def test_only_the_allow_list_is_replicated_and_never_a_password() -> None:
    settings = parse_settings({"ldap": ldap_table()}).ldap
    assert settings is not None
    assert not any(is_password_attribute(name) for name in settings.attributes)
    assert {"uid", "uidNumber", "memberUid", "shadowExpire"} <= set(settings.attributes)
    wanted = consumer_settings(settings, head_endpoint(settings), "pw")
    assert wanted["attrs"].split(",") == list(effective(settings.attributes))
    assert head_attributes(settings) == (*effective(settings.attributes), "modifyTimestamp")
    keys = parse_settings({"ldap": ldap_table(attributes=["uid", "sshPublicKey"])}).ldap
    assert keys is not None  # objectClass always: nodes search by it
    assert consumer_settings(keys, head_endpoint(keys), "pw")["attrs"] == (
        "objectClass,uid,sshPublicKey"
    )
    rules = replica_access_rules(SUFFIX, keys.attributes, ("cn=admin,cn=config",))
    assert rules == [
        "to attrs=userPassword by anonymous auth by * none",
        f'to dn.subtree="{SUFFIX}" attrs=entry,objectClass,uid,sshPublicKey by * read',
        'to * by dn.exact="cn=admin,cn=config" read by * none',
    ]


def test_replica_endpoint_from_the_director_address() -> None:
    settings = parse_settings({"ldap": ldap_table()}).ldap
    assert settings is not None
    assert replica_endpoint(settings, "d1", "10.0.0.5").uri == "ldap://10.0.0.5:389"
    assert replica_endpoint(settings, "d1", "fd00::5").uri == "ldap://[fd00::5]:389"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bases": ["ou=people,dc=other,dc=org"]}, "is not under suffix"),
        ({"bases": []}, "at least 1 item"),
        ({"mode": "push"}, "'syncrepl', 'pull' or 'auto'"),
        (
            {
                "head": {
                    "uri": "ldaps://h",
                    "bind_dn": "cn=x",
                    "credentials": {"source": "password_env", "secret_env": "X"},
                    "tls": "starttls",
                }
            },
            "an ldaps:// uri goes with tls = 'ldaps'",
        ),
        (
            {
                "head": {
                    "uri": "ldap://h",
                    "bind_dn": "cn=x",
                    "credentials": {"source": "password_env"},
                }
            },
            "needs credentials.secret_env",
        ),
        (
            {"head": {"uri": "ldap://h", "bind_dn": "cn=x", "credentials": {"source": "chain"}}},
            "must be password_file or password_env",
        ),
        ({"syncrepl_retry": "often"}, "String should match pattern"),
        (
            {"attributes": ["uid", "userPassword"]},
            "ldap.attributes: userPassword holds password hashes, which a replica never "
            "serves to nodes",
        ),
        ({"attributes": ["AuthPassword"]}, "AuthPassword holds password hashes"),
        ({"attributes": ["*"]}, r"'\*' is not an attribute name"),
        ({"attributes": ["uid cn"]}, "'uid cn' is not an attribute name"),
        ({"attributes": []}, "at least 1 item"),
    ],
)
def test_bad_ldap_settings_are_one_line(change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_settings({"ldap": ldap_table(**change)})
    assert "\n" not in str(caught.value)


def test_password_sources_never_show_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "pw"
    secret.write_text("Very-Secret-1\nsecond line ignored\n")
    password = PasswordSource(secret, None).read("ldap.head")
    assert password.reveal() == "Very-Secret-1"
    assert "Very-Secret-1" not in f"{password} {password!r}"
    monkeypatch.setenv("EMPTY_PW", " ")
    with pytest.raises(LdapConfigError, match="environment variable EMPTY_PW is empty") as caught:
        PasswordSource(None, "EMPTY_PW").read("ldap.replica")
    assert caught.value.exit_code == 2
    with pytest.raises(LdapConfigError, match="No such file"):
        PasswordSource(tmp_path / "missing", None).read("ldap.head")


def test_dn_keys_ignore_case_and_blanks() -> None:
    assert key("uid=A, ou=People ,dc=Example,dc=org") == key("uid=a,ou=people,dc=example,dc=org")

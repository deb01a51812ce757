"""Which LDAP attributes reach a director's replica, and the access rules the replica serves
them under (docs/directors.md, "What a replica holds").

A burst node's name service needs users, groups and the shadow expiry fields; it never
needs a password hash, and a job on a node can read anything the replica gives anonymous
clients. So both replication modes copy only an allow-list (`[ldap] attributes`, with the
default below), the list may never name a password attribute, and the director's slapd
answers with rules that hide the password attributes from everyone, let nobody but its
rootdn write, and let clients read the allow-list and nothing else.
"""

from __future__ import annotations

import re

# what a node's nslcd reads (passwd, group, shadow maps) plus the naming attributes of
# the tree above the users (dc/o of the suffix entry, ou of the bases) and sn, which
# inetOrgPerson entries must carry
DEFAULT_REPLICA_ATTRIBUTES: tuple[str, ...] = (
    "objectClass",
    "dc",
    "o",
    "ou",
    "cn",
    "sn",
    "uid",
    "uidNumber",
    "gidNumber",
    "gecos",
    "homeDirectory",
    "loginShell",
    "memberUid",
    "member",
    "uniqueMember",
    "shadowLastChange",
    "shadowMin",
    "shadowMax",
    "shadowWarning",
    "shadowInactive",
    "shadowExpire",
    "shadowFlag",
)

# secrets an allow-list may never name (lower case); the replica's rules hide them too
PASSWORD_ATTRIBUTES: tuple[str, ...] = (
    "userPassword",
    "authPassword",
    "sambaNTPassword",
    "sambaLMPassword",
    "sambaPasswordHistory",
    "krbPrincipalKey",
    "pwdHistory",
    "unicodePwd",
    "userPKCS12",
)
_PASSWORD_KEYS = frozenset(name.lower() for name in PASSWORD_ATTRIBUTES)

# an attribute description's name (RFC 4512 descr): a letter, then letters, digits, '-'
ATTRIBUTE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,63}")
CONFIG_ADMIN = "cn=admin,cn=config"


def is_password_attribute(name: str) -> bool:
    return name.lower() in _PASSWORD_KEYS


def attribute_problem(name: str) -> str | None:
    """Why `name` cannot be in the allow-list (one clause), or None when it can."""
    if not ATTRIBUTE_NAME.fullmatch(name):
        return f"{name[:80]!r} is not an attribute name (a letter, then letters, digits, '-')"
    if is_password_attribute(name):
        return f"{name} holds password hashes, which a replica never serves to nodes"
    return None


def effective(attributes: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The allow-list as used: objectClass always (nodes search by it), each name once."""
    seen: dict[str, str] = {"objectclass": "objectClass"}
    for name in attributes:
        seen.setdefault(name.lower(), name)
    return tuple(seen.values())


def replica_access_rules(
    suffix: str, attributes: tuple[str, ...] | list[str], readers: tuple[str, ...] = ()
) -> list[str]:
    """The replica database's rules, in order, as `olcAccess` values (slapd.conf's
    `access to` takes the same text): userPassword to nobody (a DN the site made on the
    replica may still bind: `auth`), the allow-list readable by any client, the
    rest (operational attributes such as contextCSN) only by `readers` (clustermgr's
    cn=config admin, which measures the syncrepl lag). The replica's schema must know every
    name in the list (slapd refuses a rule naming an unknown type). No rule grants write: only the
    database's rootdn (the syncrepl consumer, the pull sync), which no rule binds, writes."""
    allowed = ",".join(("entry", *effective(attributes)))
    by_readers = " ".join(f'by dn.exact="{dn}" read' for dn in readers)
    return [
        # the one password attribute every schema has (slapd refuses a rule naming a type
        # its schema lacks); any other is outside the allow-list, so the last rule's
        "to attrs=userPassword by anonymous auth by * none",
        f'to dn.subtree="{suffix}" attrs={allowed} by * read',
        f"to * {by_readers} by * none".replace("  ", " "),
    ]

"""What outside values may hold where they enter: Slurm words, host addresses, and text
made safe for a one-line log.

Slurm's slurm.conf is `Key=Value` words separated by spaces, with `#` starting a comment
and a newline ending the directive; its command lines (`scontrol update k=v ...`) split on
spaces too, and its constraint syntax (`--constraint`) gives `&|[]()*,!:` a meaning. So
a name that reaches Slurm (partition, feature, GRES type, node name) is one word of
letters, digits, `_`, `.` and `-`, starting with a letter or digit: the set every example
in Slurm's slurm.conf and gres.conf pages uses, with nothing Slurm would split on.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import unicodedata

log = logging.getLogger("clustermgr.core.inputs")

SLURM_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
SLURM_WORD_RULE = "letters, digits, '_', '.' and '-' (starting with a letter or digit)"
# a hostlist expression: node-name characters plus Slurm's range syntax
SLURM_HOSTLIST = re.compile(r"[A-Za-z0-9_.\-\[\],]{1,4096}")
SLURM_HOSTLIST_RULE = "node names and ranges: letters, digits, '_', '.', '-', '[', ']' and ','"
# RFC 1123 host names: dot-separated labels of letters, digits and '-', no label starting
# or ending with '-' (so no name can pass for an option), 253 characters at most
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
ADDRESS_RULE = "an IP address or an RFC 1123 host name"


def slurm_word_problem(value: str) -> str | None:
    """Why `value` may not be a Slurm name (None: it may)."""
    if SLURM_WORD.fullmatch(value):
        return None
    return f"{value!r} is not a Slurm name: use {SLURM_WORD_RULE}"


def slurm_hostlist_problem(value: str) -> str | None:
    if SLURM_HOSTLIST.fullmatch(value):
        return None
    return f"{value!r} is not a Slurm hostlist: use {SLURM_HOSTLIST_RULE}"


@functools.lru_cache(maxsize=65536)  # a cycle checks every node's address again
def is_host_address(value: str) -> bool:
    """An IP address (v4 or v6, no zone) or an RFC 1123 host name: what may reach
    `scontrol nodeaddr=`, ssh, rsync or an LDAP URL. Nothing else: no spaces, no `=`,
    no leading `-`, no `@`, no `:PORT`."""
    if not value or len(value) > 253:
        return False
    try:
        ipaddress.ip_address(value)
        return "%" not in value
    except ValueError:
        pass
    if value.replace(".", "").isdigit():
        return False  # digits and dots that are no IPv4 address (`1.2.3.999`)
    return all(_HOST_LABEL.fullmatch(label) for label in value.removesuffix(".").split("."))


def host_address_problem(value: str | None) -> str | None:
    if value and is_host_address(value):
        return None
    return f"{value!r} is not {ADDRESS_RULE}"


def usable_address(value: str | None, holder: str) -> str | None:
    """`value` when it is an address we may hand to Slurm, ssh, rsync or LDAP; None (with
    a warning naming `holder`, the node or director that holds it) when it is not, so
    nothing is called with it. None stays None without a warning (no address yet)."""
    if value is None or value == "":
        return None
    if is_host_address(value):
        return value
    log.warning("%s: address %r refused: not %s; not used", holder, value[:80], ADDRESS_RULE)
    return None


def _is_unsafe(char: str) -> bool:
    """A control (C0, DEL, C1), a line or paragraph separator, or a format character
    (bidi overrides, zero-width joiners) that could make a line read as something else."""
    category = unicodedata.category(char)
    return category in ("Cc", "Zl", "Zp", "Cf") or char == "\x7f"


def has_control(text: str) -> bool:
    return any(_is_unsafe(char) for char in text)


def escape_controls(text: str) -> str:
    """Every unsafe character as a visible escape (`\\n`, `\\x1c`, `\\u2028`); the rest as it is.
    A backslash stays a backslash: the output is for people, not to be parsed back."""
    if not has_control(text):
        return text
    return "".join(_escape(char) if _is_unsafe(char) else char for char in text)


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    point = ord(char)
    return f"\\x{point:02x}" if point <= 0xFF else f"\\u{point:04x}"

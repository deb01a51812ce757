"""The staging channel's wire format and its MUNGE credentials.

One request per connection, one answer: a JSON object on one line each way. Over the UNIX
socket on the head the kernel tells the service who is calling (SO_PEERCRED). Over TCP
the request line is preceded by a MUNGE credential line, made by the caller with
`munge -s SHA256(request line)`: munged proves the uid and refuses a replay, the service
refuses a credential older than `[staging] credential_max_age_s`, and the payload binds
the credential to this one request (a credential taken from one request cannot carry
another).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clustermgr.core.errors import StagingError, UsageError

MAX_LINE = 1 << 20  # a request holds paths, never data: 1 MiB is plenty
MUNGE_TIMEOUT_S = 10
_FIELD = re.compile(r"^([A-Z_]+):\s*(.*)$")
_NUMBER_AT_END = re.compile(r"\((-?\d+)\)\s*$")


class Refused(UsageError):
    """The service refused a request (not the caller's, bad input): exit 2, one line."""


@dataclass(frozen=True)
class Caller:
    """Who a request comes from, as the kernel or munged says (never the request)."""

    uid: int
    gid: int
    how: str  # "peercred" or "munge"


def _plain(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not for the wire")


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=_plain).encode() + b"\n"


def decode(line: bytes, what: str) -> dict[str, Any]:
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        raise Refused(f"{what}: not one line of at most {MAX_LINE} bytes")
    try:
        message = json.loads(line)
    except ValueError:
        raise Refused(f"{what}: not JSON") from None
    if not isinstance(message, dict):
        raise Refused(f"{what}: not a JSON object")
    return message


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def make_credential(body: bytes) -> bytes:
    """`munge -s DIGEST` as the calling user: its credential line."""
    try:
        done = subprocess.run(
            ["munge", "-s", body_digest(body)],
            capture_output=True,
            timeout=MUNGE_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise StagingError("munge is not installed here: the staging service needs it") from None
    except subprocess.TimeoutExpired:
        raise StagingError("munge did not answer (is munged running?)") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise StagingError(f"munge failed: {detail[-1] if detail else done.returncode}")
    return done.stdout.strip() + b"\n"


@dataclass(frozen=True)
class Decoded:
    uid: int
    gid: int
    encoded_at: float
    payload: str


def _parse_unmunge(output: str) -> Decoded:
    header, _, payload = output.partition("\n\n")
    fields: dict[str, str] = {}
    for line in header.splitlines():
        match = _FIELD.match(line)
        if match:
            fields[match[1]] = match[2].strip()

    def number(key: str) -> int:
        text = fields.get(key, "")
        found = _NUMBER_AT_END.search(text)
        value = found[1] if found else text
        if not value.lstrip("-").isdigit():
            raise Refused(f"unmunge gave no {key}")
        return int(value)

    return Decoded(number("UID"), number("GID"), float(number("ENCODE_TIME")), payload.strip())


def check_credential(credential: bytes, body: bytes, max_age_s: float) -> Caller:
    """The uid a MUNGE credential proves for exactly this request body."""
    if len(credential) > 4096 or not credential.startswith(b"MUNGE:"):
        raise Refused("the request carries no MUNGE credential")
    try:
        done = subprocess.run(
            ["unmunge"],
            input=credential,
            capture_output=True,
            timeout=MUNGE_TIMEOUT_S,
            check=False,
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        raise StagingError("unmunge did not run: is munge installed and munged up?") from None
    if done.returncode != 0:
        status = next(
            (
                line
                for line in done.stdout.decode(errors="replace").splitlines()
                if "STATUS" in line
            ),
            done.stderr.decode(errors="replace").strip(),
        )
        raise Refused(f"MUNGE credential refused ({status.removeprefix('STATUS:').strip()})")
    decoded = _parse_unmunge(done.stdout.decode(errors="replace"))
    age = time.time() - decoded.encoded_at
    if age > max_age_s or age < -max_age_s:
        raise Refused(f"MUNGE credential is stale ({age:.0f} s old; at most {max_age_s:.0f} s)")
    if decoded.payload != body_digest(body):
        raise Refused("MUNGE credential was made for another request (its payload differs)")
    return Caller(decoded.uid, decoded.gid, "munge")

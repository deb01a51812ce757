"""One-time tokens for the munge key: one per launch request, redeemed once per instance.

A batch launch (EC2 CreateFleet) gives every instance the same user-data, so a request's
token may be redeemed once by each instance of the request, up to the request's count,
each from its own private address. Only the token's SHA-256 is kept (in
`<state_dir>/munge-key/grants.json`, 0600 root); the token itself lives only in the
user-data of that request. The token is derived from the munge key and the request id
(identity.derived), so a relaunch under the same request id (a retry after a crash, or by
the standby after a takeover) renders the same user-data, as an idempotent launch must.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from clustermgr.mungekey.identity import derived, key_dir, locked

GRANTS_FILE = "grants.json"
KEEP_AFTER_EXPIRY = timedelta(days=1)  # then pruned: a replay is refused either way


@dataclass
class Grant:
    """What the server knows of one request's token (no token, only hashes)."""

    request_id: str
    token_hashes: list[str]
    count: int  # how many instances may redeem it
    issued_at: str  # ISO 8601, UTC
    expires_at: str  # issued_at + the boot window
    redeemed: dict[str, str] = field(default_factory=dict)  # address -> when (ISO 8601)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Grant:
        hashes = data.get("token_hashes")
        redeemed = data.get("redeemed")
        return cls(
            request_id=str(data["request_id"]),
            token_hashes=[str(h) for h in hashes] if isinstance(hashes, list) else [],
            count=int(str(data["count"])),
            issued_at=str(data["issued_at"]),
            expires_at=str(data["expires_at"]),
            redeemed={str(k): str(v) for k, v in redeemed.items()}
            if isinstance(redeemed, dict)
            else {},
        )


@dataclass(frozen=True)
class Redemption:
    """The server's verdict on one request for the key."""

    granted: bool
    request_id: str  # "" when no grant matched the token
    why: str  # for the log: never the token


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _path(state_dir: Path) -> Path:
    return key_dir(state_dir) / GRANTS_FILE


def load(state_dir: Path) -> dict[str, Grant]:
    """Every grant by request id; a damaged file counts as none (nothing is redeemable)."""
    try:
        data = json.loads(_path(state_dir).read_text())
        return {g["request_id"]: Grant.from_json(g) for g in data.get("grants", [])}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _save(state_dir: Path, grants: dict[str, Grant]) -> None:
    path = _path(state_dir)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"grants": [asdict(g) for g in grants.values()]}, handle)
    os.replace(tmp, path)


def _prune(grants: dict[str, Grant], now: datetime) -> None:
    for request_id, grant in list(grants.items()):
        if datetime.fromisoformat(grant.expires_at) + KEEP_AFTER_EXPIRY < now:
            del grants[request_id]


def request_token(munge_key: bytes, request_id: str) -> str:
    return base64.urlsafe_b64encode(derived(munge_key, f"token {request_id}")).decode().rstrip("=")


def issue(
    state_dir: Path,
    munge_key: bytes,
    request_id: str,
    count: int,
    window_s: float,
    now: datetime,
) -> str:
    """The token of `request_id` (redeemable by `count` instances until now + window)."""
    token = request_token(munge_key, request_id)
    expires = (now + timedelta(seconds=window_s)).isoformat()
    directory = key_dir(state_dir)
    with locked(directory, "grants.lock"):
        grants = load(state_dir)
        _prune(grants, now)
        grant = grants.get(request_id)
        if grant is None:
            grant = Grant(request_id, [], count, now.isoformat(), expires)
            grants[request_id] = grant
        if token_hash(token) not in grant.token_hashes:
            grant.token_hashes.append(token_hash(token))
        grant.count = max(grant.count, count)
        grant.expires_at = max(grant.expires_at, expires)
        _save(state_dir, grants)
    return token


def redeem(
    state_dir: Path,
    token: str,
    peer: str,
    addresses_of: Callable[[str], Collection[str]],
    now: datetime,
) -> Redemption:
    """Hand the key out (granted) only to an instance of the token's request, from its own
    address, once, within the boot window. `addresses_of(request_id)`: the private
    addresses of that request's instances (the database)."""
    wanted = token_hash(token)
    directory = key_dir(state_dir)
    with locked(directory, "grants.lock"):
        grants = load(state_dir)
        grant = next(
            (
                g
                for g in grants.values()
                if any(hmac.compare_digest(wanted, h) for h in g.token_hashes)
            ),
            None,
        )
        if grant is None:
            return Redemption(False, "", "no such token")
        rid = grant.request_id
        if now > datetime.fromisoformat(grant.expires_at):
            return Redemption(False, rid, "its boot window is over")
        if peer not in set(addresses_of(rid)):
            return Redemption(False, rid, "not the address of an instance of the request")
        if peer in grant.redeemed:
            return Redemption(False, rid, "already redeemed from this address")
        if len(grant.redeemed) >= grant.count:
            return Redemption(False, rid, f"already redeemed by all {grant.count} instances")
        grant.redeemed[peer] = now.isoformat()
        _save(state_dir, grants)
    return Redemption(True, rid, "redeemed")

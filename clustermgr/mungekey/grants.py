"""One-time tokens for the munge key: one per launch request, redeemed once per instance.

A request's token is derived from the munge key and the request id (identity.derived), so
every head computes the same token and a relaunch under the same request id (a retry after
a crash, or by the standby after a takeover) renders the same user-data, as an idempotent
launch must. Nothing about a token is kept anywhere: the server finds the burst node by the
asking peer's address in the database, derives that node's request token and compares.
What is kept is which address redeemed which request (`munge_key_redemptions`, in the
database both heads share), so a token is good once per instance whichever head answers.

A batch launch (EC2 CreateFleet) gives every instance the same user-data: each instance of
the request redeems the one token once, from its own private address.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from clustermgr.db.database import Database
from clustermgr.db.models import MungeKeyRedemption, Node
from clustermgr.mungekey.identity import derived

KEEP_REDEMPTIONS = timedelta(days=1)  # then pruned: the boot window refuses a replay anyway


@dataclass(frozen=True)
class Redemption:
    """The server's verdict on one request for the key."""

    granted: bool
    request_id: str  # "" when the peer is no burst node of a request
    why: str  # for the log: never the token


def request_token(munge_key: bytes, request_id: str) -> str:
    return base64.urlsafe_b64encode(derived(munge_key, f"token {request_id}")).decode().rstrip("=")


def redeem(
    database: Database,
    munge_key: bytes,
    token: str,
    peer: str,
    window_of: Callable[[str | None], float],
    now: datetime,
) -> Redemption:
    """Hand the key out (granted) only to a burst node cm-scale launched, asking from its
    own private address with its own request's token, once, within its template's boot
    window (`window_of(template)`, seconds from the node's launch)."""
    with database.session() as session:
        query = select(Node.request_id, Node.template, Node.launched_at).where(
            Node.private_address == peer, Node.request_id.is_not(None), Node.kind == "cloud"
        )
        nodes = session.execute(query).all()
        if not nodes:
            return Redemption(False, "", "not the address of a burst node cm-scale launched")
        match = next(
            (
                row
                for row in nodes
                if hmac.compare_digest(request_token(munge_key, str(row.request_id)), token)
            ),
            None,
        )
        if match is None:
            request = str(nodes[0].request_id)
            return Redemption(False, request, "not the token of the node's launch request")
        request_id = str(match.request_id)
        launched_at = match.launched_at
        if launched_at is None or now > launched_at + timedelta(seconds=window_of(match.template)):
            return Redemption(False, request_id, "its boot window is over")
        if session.get(MungeKeyRedemption, (request_id, peer)) is not None:
            return Redemption(False, request_id, "already redeemed from this address")
        session.execute(
            delete(MungeKeyRedemption).where(
                MungeKeyRedemption.redeemed_at < now - KEEP_REDEMPTIONS
            )
        )
        session.add(MungeKeyRedemption(request_id=request_id, address=peer, redeemed_at=now))
    return Redemption(True, request_id, "redeemed")

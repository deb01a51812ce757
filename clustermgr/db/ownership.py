"""What the database proves cm-scale launched: the request ids it issued (each committed
before the launch call that carries it) and the instance ids it recorded (bound to a node,
billed, held by a director). An instance that shows neither is not cm-scale's, whatever
its tags say: tags are written by whoever launches an instance in the cloud account.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.db.models import Director, InstanceRun, LaunchRequest, Node

NODE_LAUNCH = "node"
DIRECTOR_LAUNCH = "director"
CHUNK = 500  # ids per IN (...) list


@dataclass(frozen=True)
class Ownership:
    """Of the ids asked about, the ones the database knows."""

    issued: frozenset[str] = frozenset()  # request ids cm-scale issued
    recorded: frozenset[str] = frozenset()  # instance ids cm-scale bound or held
    director_requests: frozenset[str] = frozenset()  # the issued ones that launched directors

    def ours(self, instance_id: str, request_id: str | None) -> bool:
        return instance_id in self.recorded or (
            request_id is not None and request_id in self.issued
        )


@dataclass(frozen=True)
class LaunchIdentity:
    """What a node launch asked for, stored with its request id before the launch call, so
    a relaunch (after a crash, or by a standby that took over) re-issues exactly it."""

    nodes: tuple[str, ...]  # in launch order: the cloud binds instances to them in it
    jobs: tuple[str, ...] = ()
    market: str = "on-demand"
    all_or_nothing: bool = False
    placement_group: str | None = None  # the template's static group at issue time
    launch_group: str | None = None  # per-launch placement's policy at issue time
    client_token: str | None = None  # the base the cloud's idempotency tokens derive from


@dataclass(frozen=True)
class IssuedLaunch:
    """A node launch request as the database holds it."""

    request_id: str
    provider: str
    template: str
    issued_at: datetime
    identity: LaunchIdentity | None  # None: issued before migration 0015 stored it


def issue(
    session: Session,
    request_id: str,
    kind: str,
    provider: str,
    owner: str,
    now: datetime,
    identity: LaunchIdentity | None = None,
) -> None:
    """Record a request id as issued, in the caller's transaction (the one that commits the
    launch's intent), with the launch's identity. Issuing the same id again (a re-issued
    launch) changes nothing: the first identity stands."""
    if session.get(LaunchRequest, request_id) is not None:
        return
    row = LaunchRequest(
        request_id=request_id, kind=kind, provider=provider, owner=owner, issued_at=now
    )
    if identity is not None:
        row.nodes = ",".join(identity.nodes)
        row.jobs = ",".join(identity.jobs)
        row.market = identity.market
        row.all_or_nothing = identity.all_or_nothing
        row.placement_group = identity.placement_group
        row.launch_group = identity.launch_group
        row.client_token = identity.client_token
    session.add(row)


def issued_launch(session: Session, request_id: str) -> IssuedLaunch | None:
    """The node launch the database issued under this id (None: never issued, or a
    director's)."""
    row = session.get(LaunchRequest, request_id)
    if row is None or row.kind != NODE_LAUNCH:
        return None
    identity = None
    if row.nodes:
        identity = LaunchIdentity(
            nodes=tuple(n for n in row.nodes.split(",") if n),
            jobs=tuple(j for j in (row.jobs or "").split(",") if j),
            market=row.market or "on-demand",
            all_or_nothing=bool(row.all_or_nothing),
            placement_group=row.placement_group,
            launch_group=row.launch_group,
            client_token=row.client_token,
        )
    return IssuedLaunch(row.request_id, row.provider, row.owner, row.issued_at, identity)


def known(
    session: Session, request_ids: Collection[str], instance_ids: Collection[str]
) -> Ownership:
    """Which of these request ids were issued and which of these instance ids recorded (only
    the ids asked about are read: a cycle asks about the instances no node holds)."""
    issued: set[str] = set()
    directors: set[str] = set()
    for chunk in _chunks(sorted(request_ids)):
        query = select(LaunchRequest.request_id, LaunchRequest.kind).where(
            LaunchRequest.request_id.in_(chunk)
        )
        for request_id, kind in session.execute(query):
            issued.add(request_id)
            if kind == DIRECTOR_LAUNCH:
                directors.add(request_id)
    recorded: set[str] = set()
    columns: tuple[Any, ...] = (InstanceRun.instance_id, Node.instance_id, Director.instance_id)
    for chunk in _chunks(sorted(instance_ids)):
        for column in columns:
            recorded.update(session.scalars(select(column).where(column.in_(chunk))))
    return Ownership(frozenset(issued), frozenset(recorded), frozenset(directors))


@dataclass(frozen=True)
class Issued:
    """A request id the database issued: when, and for which template (or director)."""

    at: datetime
    owner: str


def issued(session: Session, request_ids: Collection[str]) -> dict[str, Issued]:
    """Of these request ids, the ones the database issued (when, and whose)."""
    found: dict[str, Issued] = {}
    for chunk in _chunks(sorted(request_ids)):
        query = select(
            LaunchRequest.request_id, LaunchRequest.issued_at, LaunchRequest.owner
        ).where(LaunchRequest.request_id.in_(chunk))
        found.update(
            (request_id, Issued(at, owner)) for request_id, at, owner in session.execute(query)
        )
    return found


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]

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


def issue(
    session: Session, request_id: str, kind: str, provider: str, owner: str, now: datetime
) -> None:
    """Record a request id as issued, in the caller's transaction (the one that commits the
    launch's intent). Issuing the same id again (a re-issued launch) changes nothing."""
    if session.get(LaunchRequest, request_id) is None:
        session.add(
            LaunchRequest(
                request_id=request_id, kind=kind, provider=provider, owner=owner, issued_at=now
            )
        )


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

"""What `clustermgr images status` shows: each image's replicas on each director, and its
machine image copies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.db.models import Director, Image, ImageReplica


@dataclass(frozen=True)
class ReplicaStatus:
    image: str
    revision: str  # the revision this director last synced
    latest: str  # the image's newest revision (a director at an older one is behind)
    director: str
    state: str
    bytes_sent: int
    files_sent: int
    sync_seconds: float | None
    verify_seconds: float | None
    verified_at: datetime | None
    error: str


def replica_status(session: Session) -> list[ReplicaStatus]:
    """One row per (image, director) that has a replica: its newest revision's replica."""
    images = {row.id: row for row in session.scalars(select(Image))}
    latest: dict[str, Image] = {}
    for row in images.values():
        if row.name not in latest or row.id > latest[row.name].id:
            latest[row.name] = row
    directors = {row.id: row.name for row in session.scalars(select(Director))}
    newest: dict[tuple[str, int], ImageReplica] = {}
    for replica in session.scalars(select(ImageReplica).order_by(ImageReplica.image_id)):
        newest[(images[replica.image_id].name, replica.director_id)] = replica
    rows = []
    for (name, director_id), replica in sorted(
        newest.items(), key=lambda item: (item[0][0], directors[item[0][1]])
    ):
        rows.append(
            ReplicaStatus(
                image=name,
                revision=images[replica.image_id].version,
                latest=latest[name].version,
                director=directors[director_id],
                state=replica.state,
                bytes_sent=replica.bytes_sent,
                files_sent=replica.files_sent,
                sync_seconds=replica.sync_seconds,
                verify_seconds=replica.verify_seconds,
                verified_at=replica.verified_at,
                error=replica.error,
            )
        )
    return rows

"""The `transfers` rows of a cmsub chain: one per direction, written by cmsub at submit
time and by the transfer jobs as they run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clustermgr.db.models import Transfer

# their bytes count against the quota
HOLDING = ("submitting", "pending", "waiting", "running", "done")


@dataclass(frozen=True)
class TransferView:
    id: int
    stage_id: str
    job_id: str
    transfer_job_id: str
    user: str
    uid: int | None
    direction: str
    transport: str
    state: str
    stage_dir: str
    bytes_total: int | None
    bytes_done: int
    files_total: int
    files_done: int
    files_verified: int
    error: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cleaned_at: datetime | None
    items: list[Any]

    def row(self) -> dict[str, Any]:
        return dict(self.__dict__)


def view(row: Transfer) -> TransferView:
    return TransferView(
        id=row.id,
        stage_id=row.stage_id,
        job_id=row.job_id,
        transfer_job_id=row.transfer_job_id,
        user=row.user,
        uid=row.uid,
        direction=row.direction,
        transport=row.transport,
        state=row.state,
        stage_dir=row.stage_dir,
        bytes_total=row.bytes_total,
        bytes_done=row.bytes_done,
        files_total=row.files_total,
        files_done=row.files_done,
        files_verified=row.files_verified,
        error=row.error or "",
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        cleaned_at=row.cleaned_at,
        items=list(row.items or []),
    )


def held_bytes(session: Session, user: str) -> int:
    """Bytes this user's staging areas hold or will hold (stage-ins not yet cleaned up)."""
    total = session.scalar(
        select(func.coalesce(func.sum(Transfer.bytes_total), 0)).where(
            Transfer.user == user,
            Transfer.direction == "in",
            Transfer.state.in_(HOLDING),
            Transfer.cleaned_at.is_(None),
        )
    )
    return int(total or 0)


def chain_rows(session: Session, stage_id: str) -> list[Transfer]:
    return list(
        session.scalars(select(Transfer).where(Transfer.stage_id == stage_id).order_by(Transfer.id))
    )


def rows_for_job(session: Session, job_id: str) -> list[Transfer]:
    """The chain that holds `job_id` as its main job or one of its transfer jobs."""
    found = session.scalars(
        select(Transfer)
        .where((Transfer.job_id == job_id) | (Transfer.transfer_job_id == job_id))
        .limit(1)
    ).first()
    return chain_rows(session, found.stage_id) if found else []


def listing(session: Session, user: str | None = None, limit: int = 200) -> list[Transfer]:
    query = select(Transfer).order_by(Transfer.id.desc()).limit(limit)
    if user:
        query = query.where(Transfer.user == user)
    return list(session.scalars(query))


def now() -> datetime:
    return datetime.now(UTC)

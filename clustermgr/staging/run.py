"""The transfer step (`cmsub-transfer --transfer ID`), run by the chain's stage-in and
stage-out jobs as the job's user: moves and verifies the data, records it, and

- after a failed stage-in, cancels the chain's job and stage-out (`scancel`), so the job
  never starts; the reason is on the records (`cmsub --status JOBID`);
- after a stage-out that verified everything, removes the staging area (at once, or with
  `[staging] retention_s`, at a later stage-out of the same user).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from clustermgr.config import Settings
from clustermgr.db.engine import Database
from clustermgr.db.models import Transfer
from clustermgr.errors import ClusterMgrError, NotFoundError, StagingError, UsageError
from clustermgr.staging import chain, director, records, rsync_transport, s3_transport
from clustermgr.staging.checks import StageIn, StageOut, area_path
from clustermgr.staging.manifest import FileEntry
from clustermgr.staging.progress import Progress
from clustermgr.staging.rsync_transport import Report


@dataclass(frozen=True)
class Job:
    """What one transfer step does, read from its row."""

    id: int
    direction: str
    transport: str
    uid: int | None
    user: str
    stage_id: str
    area: str
    stage_in: list[StageIn]
    stage_out: list[StageOut]


def load(database: Database, transfer_id: int) -> Job:
    with database.session() as session:
        row = session.get(Transfer, transfer_id)
        if row is None:
            raise NotFoundError(f"cmsub-transfer: no transfer {transfer_id}")
        items: list[Any] = list(row.items or [])
        incoming = row.direction == "in"
        stage_in = (
            [StageIn(Path(i[0]), area_path(i[1], "DEST"), bool(i[2])) for i in items]
            if incoming
            else []
        )
        stage_out = (
            [] if incoming else [StageOut(area_path(i[0], "SRC"), Path(i[1])) for i in items]
        )
        return Job(
            row.id,
            row.direction,
            row.transport,
            row.uid,
            row.user,
            row.stage_id,
            row.stage_dir,
            stage_in,
            stage_out,
        )


@contextlib.contextmanager
def _row(database: Database, transfer_id: int) -> Iterator[Transfer]:
    with database.session() as session:
        row = session.get(Transfer, transfer_id)
        assert row is not None
        yield row


def _check_owner(job: Job) -> None:
    if job.uid is not None and os.getuid() != job.uid:
        raise UsageError(
            f"cmsub-transfer: transfer {job.id} belongs to uid {job.uid} ({job.user}); it runs "
            f"as that user's job, not as uid {os.getuid()}"
        )


def _check_readable(job: Job) -> None:
    for item in job.stage_in:  # rights may have changed since submission
        mode = os.R_OK | (os.X_OK if item.is_dir else 0)
        if not os.access(item.source, mode):
            raise StagingError(f"cannot read {str(item.source)!r} (permission denied)")


def _move(
    settings: Settings, database: Database, job: Job, progress: Progress
) -> tuple[list[FileEntry], Report]:
    if job.transport == "s3":
        region = next(
            (r for r in settings.staging.regions if r.s3_bucket == job.area[5:].split("/")[0]),
            None,
        )
        if region is None:
            raise StagingError(f"{job.area}: no [[staging.regions]] has this bucket")
        s3 = s3_transport.client(
            settings.provider(region.provider), region, settings.staging.s3_workers
        )
        bucket = s3_transport.parse_area(job.area)
        if job.direction == "in":
            return s3_transport.stage_in(s3, settings.staging, job.stage_in, bucket, progress)
        return s3_transport.stage_out(s3, settings.staging, job.stage_out, bucket, progress)
    area = director.resolve(settings, database, job.area)
    return move_rsync(job.direction, area, job.stage_in, job.stage_out, progress)


def move_rsync(
    direction: str,
    area: str,
    stage_in: list[StageIn],
    stage_out: list[StageOut],
    progress: Progress,
) -> tuple[list[FileEntry], Report]:
    """One rsync stage-in or stage-out with its manifest (also what the bench runs)."""
    with ThreadPoolExecutor(max_workers=1) as reader:
        # the last run's manifest is needed only after the copy: read it meanwhile
        previous = reader.submit(rsync_transport.read_remote_manifest, area, direction)
        if direction == "in":
            pairs = rsync_transport.stage_in_pairs(stage_in, area)
        else:
            pairs = rsync_transport.stage_out_pairs(stage_out, area)
        entries, report = rsync_transport.transfer(
            pairs, previous.result, progress, hash_first=direction == "in"
        )
    rsync_transport.write_remote_manifest(area, direction, entries)
    return entries, report


def run(settings: Settings, database: Database, transfer_id: int, progress: Progress) -> Report:
    job = load(database, transfer_id)
    _check_owner(job)
    with _row(database, transfer_id) as row:
        row.state = "running"
        row.started_at = records.now()
        row.transfer_job_id = os.environ.get("SLURM_JOB_ID", row.transfer_job_id)
        row.error = None
    try:
        _check_readable(job)
        progress.begin(f"stage-{job.direction} {job.stage_id}", _expected(job))
        try:
            _entries, report = _move(settings, database, job, progress)
        finally:
            progress.end()
    except (ClusterMgrError, OSError) as exc:
        message = str(exc) if isinstance(exc, ClusterMgrError) else f"{exc.strerror}: {exc}"
        _failed(settings, database, job, message)
        raise StagingError(f"stage-{job.direction} failed: {message}") from exc
    with _row(database, transfer_id) as row:
        row.state = "done"
        row.finished_at = records.now()
        row.bytes_total = report.bytes_total
        row.bytes_done = report.bytes_sent
        row.files_total = report.files_total
        row.files_done = report.files_sent
        row.files_verified = report.files_total
    progress.note(
        f"stage-{job.direction} done: {report.files_total} files, {report.bytes_total:,} bytes "
        f"({report.files_sent} sent, all verified) in {report.seconds:.1f} s"
    )
    if job.direction == "out":
        clean(settings, database, job.user)
    return report


def _expected(job: Job) -> int:
    if job.direction != "in":
        return 0
    with contextlib.suppress(OSError):
        return sum(
            i.source.stat().st_size if not i.is_dir else _tree_size(i.source) for i in job.stage_in
        )
    return 0


def _tree_size(root: Path) -> int:
    return sum((Path(r) / n).lstat().st_size for r, _d, names in os.walk(root) for n in names)


def _failed(settings: Settings, database: Database, job: Job, message: str) -> None:
    with _row(database, job.id) as row:
        row.state = "failed"
        row.error = message
        row.finished_at = records.now()
    if job.direction != "in":
        return
    reason = f"stage-in failed: {message}"
    to_cancel: list[str] = []
    with database.session() as session:
        for row in records.chain_rows(session, job.stage_id):
            if row.direction == "out":
                to_cancel = [i for i in (row.job_id, row.transfer_job_id) if i]
                row.state = "cancelled"
                row.error = reason
    slurm = settings.slurm
    with contextlib.suppress(ClusterMgrError):
        chain.scancel(slurm.bin_dir, to_cancel, slurm.command_timeout_s)


def clean(settings: Settings, database: Database, user: str) -> list[str]:
    """Remove this user's staging areas whose stage-out finished `retention_s` ago."""
    cutoff = records.now() - timedelta(seconds=settings.staging.retention_s)
    removed: list[str] = []
    with database.session() as session:
        outs = session.scalars(
            select(Transfer).where(
                Transfer.user == user,
                Transfer.direction == "out",
                Transfer.state == "done",
                Transfer.cleaned_at.is_(None),
                Transfer.finished_at <= cutoff,
            )
        ).all()
        areas = [(row.stage_id, row.stage_dir, row.transport) for row in outs]
    for stage_id, area, transport in areas:
        with contextlib.suppress(ClusterMgrError, OSError):
            _remove(settings, director.resolve(settings, database, area), transport)
            with database.session() as session:
                for row in records.chain_rows(session, stage_id):
                    row.cleaned_at = records.now()
            removed.append(area)
    return removed


def _remove(settings: Settings, area: str, transport: str) -> None:
    if transport == "s3":
        parsed = s3_transport.parse_area(area)
        region = next(r for r in settings.staging.regions if r.s3_bucket == parsed.bucket)
        s3 = s3_transport.client(
            settings.provider(region.provider), region, settings.staging.s3_workers
        )
        s3_transport.remove_area(s3, parsed)
    else:
        rsync_transport.remove_area(area)

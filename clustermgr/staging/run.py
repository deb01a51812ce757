"""The transfer step (`cmsub-transfer --transfer ID`), run by the chain's stage-in and
stage-out jobs as the job's user. It asks the staging service for its plan (the service
checks the transfer is this user's), moves and verifies the data with the user's own
rights, and reports the result through the same channel. Then

- a stage-out writes beside its targets and moves the verified results into place
  (`landing.py`: a fresh `DEST/<jobid>/`, `--overwrite`, or a failed job's `.partial`);
- after a failed stage-in, it cancels the chain's job and stage-out (`scancel` as the
  user: Slurm lets a user cancel only their own jobs); the reason is on the records;
- after a stage-out that verified everything, it removes the staging areas the service
  names (at once, or with `[staging] retention_s`, at a later stage-out of the user), each
  checked to be inside the user's own `<root>/<user>/` first.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clustermgr.config import Settings
from clustermgr.core.errors import ClusterMgrError, StagingError
from clustermgr.staging import (
    areas,
    client,
    jobchain,
    landing,
    rsync_transport,
    rsyncd_auth,
    s3_transport,
)
from clustermgr.staging.checks import StageIn, StageOut, area_path, check_links
from clustermgr.staging.manifest import FileEntry, Previous
from clustermgr.staging.progress import Progress
from clustermgr.staging.rsync_transport import Report


@dataclass(frozen=True)
class Job:
    """What one transfer step does, as the service planned it."""

    id: int
    direction: str
    transport: str
    user: str
    stage_id: str
    area: str
    root: str  # the staging root; the area is inside <root>/<user>/
    stage_in: list[StageIn]
    stage_out: list[StageOut]
    fresh: bool = False  # never began, its area its own: no earlier manifest to read
    job_id: str = ""  # the chain's job: a stage-out's results go into DEST/<job_id>/


def job_of(plan: dict[str, Any]) -> Job:
    items: list[Any] = list(plan.get("items") or [])
    incoming = plan["direction"] == "in"
    stage_in = (
        [StageIn(Path(i[0]), area_path(i[1], "DEST"), bool(i[2])) for i in items]
        if incoming
        else []
    )
    stage_out = (
        []
        if incoming
        else [
            StageOut(area_path(i[0], "SRC"), Path(i[1]), len(i) > 2 and i[2] is True) for i in items
        ]
    )
    job = Job(
        int(plan["transfer"]),
        str(plan["direction"]),
        str(plan["transport"]),
        str(plan["user"]),
        str(plan["stage_id"]),
        str(plan["area"]),
        str(plan["root"]),
        stage_in,
        stage_out,
        plan.get("fresh") is True,
        str(plan.get("job") or ""),
    )
    areas.check_inside(job.area, job.root, job.user)
    return job


def _check_area(job: Job) -> None:
    """A local area's `<root>/<user>` is this user's own, closed to others (as the user:
    the service checked it too, but the data movers may see another filesystem)."""
    if job.transport == "rsync" and not rsync_transport.is_url(job.root):
        areas.check_owned(Path(areas.user_root(job.root, job.user)), os.getuid())


def _check_sources(job: Job) -> None:
    for item in job.stage_in:  # rights may have changed since submission
        mode = os.R_OK | (os.X_OK if item.is_dir else 0)
        if not os.access(item.source, mode):
            raise StagingError(f"cannot read {str(item.source)!r} (permission denied)")
    check_links(job.stage_in)  # links made since submission (rsync --safe-links skips them)


def _move(
    settings: Settings, job: Job, access: dict[str, Any] | None, progress: Progress
) -> tuple[list[FileEntry], Report]:
    if job.direction == "out":  # beside the target first, then into place (landing.py)
        partial = _job_failed(settings, job, progress)
        key = job.job_id or job.stage_id
        moved, placed = landing.land(
            job.stage_out,
            key,
            lambda items: _transport(settings, replace(job, stage_out=items), access, progress),
            partial=partial,
        )
        for path in placed:
            progress.note(f"results in {path}" + (" (the job failed: partial)" if partial else ""))
        return moved
    return _transport(settings, job, access, progress)


def _job_failed(settings: Settings, job: Job, progress: Progress) -> bool:
    """Whether the chain's job did not complete (the stage-out runs after any end)."""
    if not job.job_id:
        return False
    slurm = settings.slurm
    ended_well = jobchain.job_ended_well(slurm.bin_dir, job.job_id, slurm.command_timeout_s)
    if ended_well is None:
        progress.note(f"Slurm no longer knows how job {job.job_id} ended: taken as completed")
        return False
    return not ended_well


def _transport(
    settings: Settings, job: Job, access: dict[str, Any] | None, progress: Progress
) -> tuple[list[FileEntry], Report]:
    if job.transport == "s3":
        if not access:
            raise StagingError(f"{job.area}: the staging service gave no S3 credentials")
        area = s3_transport.parse_area(job.area)
        bucket = s3_transport.bucket_with(settings, access, area)
        if job.direction == "in":
            return s3_transport.stage_in(bucket, job.stage_in, area, progress)
        return s3_transport.stage_out(bucket, job.stage_out, area, progress)
    return move_rsync(
        job.direction, job.area, job.stage_in, job.stage_out, progress, fresh=job.fresh
    )


def move_rsync(
    direction: str,
    area: str,
    stage_in: list[StageIn],
    stage_out: list[StageOut],
    progress: Progress,
    *,
    fresh: bool = False,
) -> tuple[list[FileEntry], Report]:
    """One rsync stage-in or stage-out with its manifest (also what the bench runs).
    `fresh`: the service says this transfer never began and its area is its own, so there
    is no manifest of an earlier run to read (if there were one after all, its files would
    only be compared again rather than trusted)."""
    with ThreadPoolExecutor(max_workers=1) as reader:
        if fresh:
            previous: Callable[[], Previous] = functools.partial(Previous, {})
        else:  # the last run's manifest is needed only after the copy: read it meanwhile
            previous = reader.submit(rsync_transport.read_remote_manifest, area, direction).result
        if direction == "in":
            pairs = rsync_transport.stage_in_pairs(stage_in, area)
        else:
            pairs = rsync_transport.stage_out_pairs(stage_out, area)
        entries, report = rsync_transport.transfer(pairs, previous, progress)
    rsync_transport.write_remote_manifest(area, direction, entries)
    return entries, report


def _failed(settings: Settings, transfer_id: int, message: str) -> None:
    """Record the failure; after a failed stage-in, cancel the chain's job and stage-out
    (as this user: Slurm cancels only the user's own jobs)."""
    answer = client.call(settings.staging, "finish", transfer=transfer_id, error=message)
    slurm = settings.slurm
    with contextlib.suppress(ClusterMgrError):
        jobchain.scancel(slurm.bin_dir, list(answer.get("cancel") or []), slurm.command_timeout_s)


def _plan(settings: Settings, transfer_id: int, progress: Progress) -> dict[str, Any]:
    """The service's plan; while the region's director is not READY, wait for it (the
    service records the wait, and cm-scale brings the director up)."""
    staging = settings.staging
    deadline = time.monotonic() + staging.director_wait_s
    shown = ""
    while True:
        plan = client.call(
            staging, "begin", transfer=transfer_id, slurm_job=os.environ.get("SLURM_JOB_ID", "")
        )
        waiting = str(plan.get("wait") or "")
        if not waiting:
            return plan
        if time.monotonic() >= deadline:
            message = f"gave up after {staging.director_wait_s:.0f} s {waiting}"
            _failed(settings, transfer_id, message)
            raise StagingError(message)
        if waiting != shown:
            progress.note(waiting)
            shown = waiting
        time.sleep(staging.director_poll_s)


def run(settings: Settings, transfer_id: int, progress: Progress) -> Report:
    plan = _plan(settings, transfer_id, progress)
    # a director's rsync daemon: this user's password, to rsync by its environment only
    with rsyncd_auth.password_in_env(str(plan.pop("rsync_password", "") or "")):
        return _run_planned(settings, plan, progress)


def _run_planned(settings: Settings, plan: dict[str, Any], progress: Progress) -> Report:
    staging = settings.staging
    job = job_of(plan)
    try:
        _check_area(job)
        _check_sources(job)
        progress.begin(f"stage-{job.direction} {job.stage_id}", _expected(job))
        try:
            _entries, report = _move(settings, job, plan.get("s3"), progress)
        finally:
            progress.end()
    except (ClusterMgrError, OSError) as exc:
        message = str(exc) if isinstance(exc, ClusterMgrError) else f"{exc.strerror}: {exc}"
        _failed(settings, job.id, message)
        raise StagingError(f"stage-{job.direction} failed: {message}") from exc
    answer = client.call(
        staging,
        "finish",
        transfer=job.id,
        bytes_total=report.bytes_total,
        bytes_sent=report.bytes_sent,
        files_total=report.files_total,
        files_sent=report.files_sent,
    )
    progress.note(
        f"stage-{job.direction} done: {report.files_total} files, {report.bytes_total:,} bytes "
        f"({report.files_sent} sent, all verified) in {report.seconds:.1f} s"
    )
    clean(settings, job.user, list(answer.get("clean") or []))
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


def clean(settings: Settings, user: str, finished: list[dict[str, Any]]) -> list[str]:
    """Remove the finished areas the service named, each only when it is inside this
    user's own area (`<root>/<user>/`); tell the service which went."""
    removed: list[str] = []
    for item in finished:
        with contextlib.suppress(ClusterMgrError, OSError, KeyError):
            areas.check_inside(item["area"], item["root"], user)
            _remove(settings, item)
            client.call(settings.staging, "cleaned", stage_ids=[item["stage_id"]])
            removed.append(item["area"])
    return removed


def _remove(settings: Settings, item: dict[str, Any]) -> None:
    if item["transport"] == "s3":
        area = s3_transport.parse_area(item["area"])
        s3_transport.remove_area(s3_transport.bucket_with(settings, item["s3"], area), area)
    else:
        rsync_transport.remove_area(item["area"])

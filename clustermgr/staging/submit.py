"""cmsub's submission: check the spec, estimate, check the quota, record the chain's two
transfers, submit the three jobs, release the stage-in. Runs as the submitting user."""

from __future__ import annotations

import os
import pwd
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import Settings, StagingRegionSettings
from clustermgr.db.engine import Database
from clustermgr.db.models import Transfer
from clustermgr.errors import UsageError, WorkloadError
from clustermgr.staging import chain, records, rsync_transport, s3_transport
from clustermgr.staging.checks import (
    Estimate,
    StageIn,
    StageOut,
    check_quota,
    check_stage_in,
    check_stage_out,
    estimate,
)
from clustermgr.staging.spec import StagingSpec, Transport


@dataclass(frozen=True)
class Plan:
    """Everything checked, nothing submitted yet."""

    user: str
    uid: int
    stage_id: str
    transport: Transport
    region: StagingRegionSettings
    area: str  # where the transfers put the data (rsync target or s3 url)
    job_stage_dir: str  # $CMSUB_STAGE_DIR for the job
    stage_in: list[StageIn]
    stage_out: list[StageOut]
    estimate: Estimate
    resumes: str = ""  # the job of a failed chain whose staging area this one takes over


@dataclass(frozen=True)
class Submitted:
    plan: Plan
    ids: chain.ChainIds
    argv: chain.ChainArgs

    def row(self) -> dict[str, Any]:
        return {
            "stage_id": self.plan.stage_id,
            "stage_in_job": self.ids.stage_in,
            "job": self.ids.job,
            "stage_out_job": self.ids.stage_out,
            "transport": self.plan.transport,
            "region": self.plan.region.provider,
            "stage_dir": self.plan.job_stage_dir,
            "bytes": self.plan.estimate.bytes_total,
            "files": self.plan.estimate.files_total,
            "resumes": self.plan.resumes or None,
        }


def current_user() -> tuple[str, int]:
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return str(uid), uid


def plan(settings: Settings, spec: StagingSpec, cwd: Path, held_bytes: int) -> Plan:
    """Check everything; a UsageError (one line, exit 2) on the first problem."""
    staging = settings.staging
    user, uid = current_user()
    if not spec.script.is_file() or not os.access(spec.script, os.R_OK):
        raise UsageError(f"cmsub: job script {str(spec.script)!r} is not a readable file")
    if not os.access(staging.transfer_command, os.X_OK):
        raise UsageError(
            f"cmsub: [staging] transfer_command {str(staging.transfer_command)!r} is not an "
            "executable on this host (the transfer jobs run it): ask your admin"
        )
    stage_in = [check_stage_in(item, cwd) for item in spec.stage_in]
    stage_out = [check_stage_out(item, cwd) for item in spec.stage_out]
    _no_clashes([s.dest for s in stage_in], "--stage-in DEST")
    wanted = estimate(stage_in)
    check_quota(user, held_bytes, wanted.bytes_total, staging.quota_bytes)
    region = staging.region(spec.region)
    transport: Transport = spec.transport or staging.default_transport
    stage_id = uuid.uuid4().hex[:16]
    area, job_dir = locate(region, transport, user, stage_id)
    return Plan(user, uid, stage_id, transport, region, area, job_dir, stage_in, stage_out, wanted)


def locate(
    region: StagingRegionSettings, transport: Transport, user: str, area_id: str
) -> tuple[str, str]:
    """The staging area (where the transfers put the data) and $CMSUB_STAGE_DIR."""
    if transport == "s3":
        area = s3_transport.area_of(region, user, area_id).url
        return area, area
    if not region.rsync_target:
        raise UsageError(
            f"cmsub: staging region {region.provider} has no rsync_target "
            "([[staging.regions]]); use --transport s3 or ask your admin"
        )
    area = rsync_transport.area_of(region.rsync_target, user, area_id)
    if region.node_root:
        return area, rsync_transport.area_of(region.node_root, user, area_id)
    if rsync_transport.is_url(area):
        raise UsageError(
            f"cmsub: staging region {region.provider}: set node_root (where burst nodes "
            "mount the staging area)"
        )
    return area, area


def resume_failed(
    session: Session, checked: Plan, in_items: list[list[Any]], *, claim: bool = True
) -> Plan:
    """The same stage-in (items, transport, region) failed before and its area is still
    there: stage into that area again, so the transfer resumes (rsync skips what arrived,
    `--partial` keeps a half-sent file; what it did not send itself is compared)."""
    candidates = session.scalars(
        select(Transfer)
        .where(
            Transfer.user == checked.user,
            Transfer.direction == "in",
            Transfer.state == "failed",
            Transfer.transport == checked.transport,
            Transfer.cleaned_at.is_(None),
        )
        .order_by(Transfer.id.desc())
        .limit(20)
    ).all()
    for row in candidates:
        area_id = row.stage_dir.rstrip("/").rsplit("/", 1)[-1]
        area, job_dir = locate(checked.region, checked.transport, checked.user, area_id)
        if area == row.stage_dir and list(row.items or []) == in_items:
            if claim:
                row.cleaned_at = records.now()  # the area is the new chain's now
            return replace(checked, area=area, job_stage_dir=job_dir, resumes=row.job_id)
    return checked


def _no_clashes(paths: list[str], what: str) -> None:
    seen: set[str] = set()
    for path in paths:
        for other in seen:
            if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
                raise UsageError(f"cmsub: {what} {path!r} overlaps {other!r}")
        seen.add(path)


def _row(plan: Plan, direction: str, items: list[list[Any]]) -> Transfer:
    return Transfer(
        job_id="",
        user=plan.user,
        uid=plan.uid,
        direction=direction,
        source=" ".join(str(i[0]) for i in items)[:2000],
        destination=" ".join(str(i[1]) for i in items)[:2000],
        transport=plan.transport,
        state="submitting",
        bytes_total=plan.estimate.bytes_total if direction == "in" else None,
        files_total=plan.estimate.files_total if direction == "in" else 0,
        stage_id=plan.stage_id,
        stage_dir=plan.area,
        items=items,
    )


def submit(settings: Settings, database: Database, spec: StagingSpec, cwd: Path) -> Submitted:
    with database.session() as session:
        held = records.held_bytes(session, current_user()[0])
    checked = plan(settings, spec, cwd, held)
    in_items = [[str(s.source), s.dest, s.is_dir] for s in checked.stage_in]
    out_items = [[s.source, str(s.dest)] for s in checked.stage_out]
    with database.session() as session:
        checked = resume_failed(session, checked, in_items, claim=not spec.dry_run)
        rows = _row(checked, "in", in_items), _row(checked, "out", out_items)
        session.add_all(rows)
        session.flush()
        in_id, out_id = rows[0].id, rows[1].id
    args = chain.build(
        settings.staging,
        checked.region,
        stage_id=checked.stage_id,
        stage_dir=checked.job_stage_dir,
        in_id=in_id,
        out_id=out_id,
        sbatch_args=spec.sbatch_args,
        script=spec.script,
        script_args=spec.script_args,
    )
    if spec.dry_run:
        _forget(database, checked.stage_id)
        return Submitted(checked, chain.ChainIds("-", "-", "-"), args)
    slurm = settings.slurm
    try:
        ids = chain.submit(slurm.bin_dir, args, slurm.command_timeout_s)
    except WorkloadError:
        _forget(database, checked.stage_id)
        raise
    with database.session() as session:
        for row in records.chain_rows(session, checked.stage_id):
            row.job_id = ids.job
            row.transfer_job_id = ids.stage_in if row.direction == "in" else ids.stage_out
            row.state = "pending"
    chain.release(slurm.bin_dir, ids.stage_in, slurm.command_timeout_s)
    return Submitted(checked, ids, args)


def _forget(database: Database, stage_id: str) -> None:
    with database.session() as session:
        for row in records.chain_rows(session, stage_id):
            session.delete(row)

"""cmsub's submission, as the submitting user: check the spec with the user's own rights,
estimate, ask the staging service to record the chain (it checks the quota and owns the
rows and the area), submit the three jobs, tell the service their ids, release the
stage-in. cmsub never opens the database."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustermgr.config import Settings, StagingRegionSettings
from clustermgr.core.errors import ClusterMgrError, UsageError, WorkloadError
from clustermgr.staging import client, jobchain
from clustermgr.staging.checks import (
    Estimate,
    StageIn,
    StageOut,
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
    ids: jobchain.ChainIds
    argv: jobchain.ChainArgs

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


@dataclass(frozen=True)
class Checked:
    """What cmsub checked with the user's rights, before asking the service."""

    stage_in: list[StageIn]
    stage_out: list[StageOut]
    estimate: Estimate


def check(settings: Settings, spec: StagingSpec, cwd: Path) -> Checked:
    """Check everything the user's rights decide; a UsageError (one line, exit 2) on the
    first problem. The quota and the area are the service's to check."""
    staging = settings.staging
    if not spec.script.is_file() or not os.access(spec.script, os.R_OK):
        raise UsageError(f"cmsub: job script {str(spec.script)!r} is not a readable file")
    if not os.access(staging.transfer_command, os.X_OK):
        raise UsageError(
            f"cmsub: [staging] transfer_command {str(staging.transfer_command)!r} is not an "
            "executable on this host (the transfer jobs run it): ask your admin"
        )
    staging.region(spec.region)  # an unknown --region: one line before anything else
    stage_in = [check_stage_in(item, cwd) for item in spec.stage_in]
    stage_out = [check_stage_out(item, cwd, overwrite=spec.overwrite) for item in spec.stage_out]
    _no_clashes([(s.dest, item.origin) for s, item in zip(stage_in, spec.stage_in, strict=True)])
    return Checked(stage_in, stage_out, estimate(stage_in))


def _no_clashes(dests: list[tuple[str, str]]) -> None:
    """Two stage-in DESTs may not overlap; the line names where each was given."""
    seen: list[tuple[str, str]] = []
    for path, origin in dests:
        for other, other_origin in seen:
            if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
                raise UsageError(
                    f"cmsub: {origin}: --stage-in DEST {path!r} overlaps {other!r} "
                    f"(given at {other_origin})"
                )
        seen.append((path, origin))


def submit(settings: Settings, spec: StagingSpec, cwd: Path) -> Submitted:
    staging = settings.staging
    checked = check(settings, spec, cwd)
    created = client.call(
        staging,
        "create",
        region=spec.region,
        transport=spec.transport,
        stage_in=[[str(s.source), s.dest, s.is_dir] for s in checked.stage_in],
        stage_out=[[s.source, str(s.dest), s.overwrite] for s in checked.stage_out],
        bytes=checked.estimate.bytes_total,
        files=checked.estimate.files_total,
        dry_run=spec.dry_run,
    )
    user, uid = current_user()
    region = staging.region(str(created["region"]))
    plan = Plan(
        user,
        uid,
        str(created["stage_id"]),
        created["transport"],
        region,
        str(created["area"]),
        str(created["stage_dir"]),
        checked.stage_in,
        checked.stage_out,
        checked.estimate,
        str(created["resumes"]),
    )
    args = jobchain.build(
        staging,
        region,
        stage_id=plan.stage_id,
        stage_dir=plan.job_stage_dir,
        in_id=int(created["in_id"]),
        out_id=int(created["out_id"]),
        sbatch_args=spec.sbatch_args,
        script=spec.script,
        script_args=spec.script_args,
    )
    if spec.dry_run:
        return Submitted(plan, jobchain.ChainIds("-", "-", "-"), args)
    slurm = settings.slurm
    try:
        ids = jobchain.submit(slurm.bin_dir, args, slurm.command_timeout_s)
    except WorkloadError:
        client.call(staging, "forget", stage_id=plan.stage_id)
        raise
    try:
        client.call(
            staging,
            "submitted",
            stage_id=plan.stage_id,
            stage_in_job=ids.stage_in,
            job=ids.job,
            stage_out_job=ids.stage_out,
        )
    except ClusterMgrError:
        jobchain.scancel(
            slurm.bin_dir, [ids.stage_in, ids.job, ids.stage_out], slurm.command_timeout_s
        )
        client.call(staging, "forget", stage_id=plan.stage_id)
        raise
    jobchain.release(slurm.bin_dir, ids.stage_in, slurm.command_timeout_s)
    return Submitted(plan, ids, args)

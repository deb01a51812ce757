"""The three sbatch argv lists of a cmsub chain, and their submission (argv only).

1. stage-in: the user's job on the data-mover partition, submitted held (`--hold`), so it
   cannot fail before the jobs that depend on it exist;
2. the user's job, `--dependency=afterok:<stage-in>`, pinned to the region's partition and
   features, with `CMSUB_STAGE_DIR` in its environment;
3. stage-out: `--dependency=afterany:<job>`, on the data-mover partition: it runs however
   the job ended, and brings a failed job's results back marked partial (`job_ended_well`);
then the stage-in is released. A failing submission cancels what was already submitted.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clustermgr.config import StagingRegionSettings, StagingSettings
from clustermgr.core.errors import WorkloadError


@dataclass(frozen=True)
class ChainArgs:
    stage_in: list[str]
    job: list[str]  # without its dependency (added once the stage-in id is known)
    stage_out: list[str]  # likewise


@dataclass(frozen=True)
class ChainIds:
    stage_in: str
    job: str
    stage_out: str


def transfer_argv(
    staging: StagingSettings, direction: str, transfer_id: int, stage_id: str, name: str
) -> list[str]:
    return [
        "--parsable",
        f"--partition={staging.data_mover_partition}",
        f"--job-name=cmsub-{direction}-{name}",
        f"--comment=cmsub {stage_id}",
        str(staging.transfer_command),
        f"--transfer={transfer_id}",
    ]


def build(
    staging: StagingSettings,
    region: StagingRegionSettings,
    *,
    stage_id: str,
    stage_dir: str,
    in_id: int,
    out_id: int,
    sbatch_args: Sequence[str],
    script: Path,
    script_args: Sequence[str],
) -> ChainArgs:
    name = script.name or "job"
    job = ["--parsable", f"--partition={region.partition}"]
    # every node of a template carries its provider's name as a feature (slurmconf)
    job.append(f"--constraint={'&'.join(region.features or [region.provider])}")
    job += [
        f"--export=ALL,CMSUB_STAGE_DIR={stage_dir},CMSUB_STAGE_ID={stage_id}",
        *sbatch_args,
        str(script),
        *script_args,
    ]
    stage_in = transfer_argv(staging, "in", in_id, stage_id, name)
    stage_in.insert(1, "--hold")
    return ChainArgs(
        stage_in=stage_in,
        job=job,
        stage_out=transfer_argv(staging, "out", out_id, stage_id, name),
    )


def with_dependency(argv: list[str], kind: str, job_id: str) -> list[str]:
    return [argv[0], f"--dependency={kind}:{job_id}", *argv[1:]]


def _slurm(bin_dir: Path, tool: str, argv: Sequence[str], timeout: float) -> str:
    full = [str(bin_dir / tool), *argv]
    try:
        done = subprocess.run(full, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise WorkloadError(f"{full[0]} not found: set [slurm] bin_dir") from None
    except subprocess.TimeoutExpired:
        raise WorkloadError(f"{tool} did not answer within {timeout:.0f} s") from None
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [""])[-1]
        raise WorkloadError(f"{tool} exited {done.returncode}: {detail}")
    return done.stdout


def sbatch(bin_dir: Path, argv: Sequence[str], timeout: float) -> str:
    """The job id `sbatch --parsable` printed (`ID` or `ID;cluster`)."""
    return _slurm(bin_dir, "sbatch", argv, timeout).strip().split(";")[0]


def scancel(bin_dir: Path, job_ids: Sequence[str], timeout: float) -> None:
    if job_ids:
        _slurm(bin_dir, "scancel", list(job_ids), timeout)


def submit(bin_dir: Path, args: ChainArgs, timeout: float) -> ChainIds:
    submitted: list[str] = []
    try:
        stage_in = sbatch(bin_dir, args.stage_in, timeout)
        submitted.append(stage_in)
        job = sbatch(bin_dir, with_dependency(args.job, "afterok", stage_in), timeout)
        submitted.append(job)
        stage_out = sbatch(bin_dir, with_dependency(args.stage_out, "afterany", job), timeout)
        submitted.append(stage_out)
    except WorkloadError:
        with contextlib.suppress(WorkloadError):
            scancel(bin_dir, submitted, timeout)
        raise
    return ChainIds(stage_in, job, stage_out)


def release(bin_dir: Path, job_id: str, timeout: float) -> None:
    _slurm(bin_dir, "scontrol", ["release", job_id], timeout)


def job_ended_well(bin_dir: Path, job_id: str, timeout: float) -> bool | None:
    """Whether the job (every task of an array) ended COMPLETED, as `scontrol show job`
    says; None when Slurm no longer knows it (or cannot be asked)."""
    try:
        shown = _slurm(bin_dir, "scontrol", ["show", "job", "-o", job_id], timeout)
    except WorkloadError:
        return None
    states = [
        word.removeprefix("JobState=")
        for line in shown.splitlines()
        for word in line.split()
        if word.startswith("JobState=")
    ]
    if not states:
        return None
    return all(state == "COMPLETED" for state in states)

"""`cmsub`: submit a job with its data staged in and out (docs/staging.md), `cmsub --status
JOBID`, and `cmsub-transfer --transfer ID` (what the chain's transfer jobs run).

cmsub takes any sbatch option, so its command line is parsed by clustermgr.staging.spec,
not click. Errors are one line: exit 2 for what the user can fix, 1 for failures.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, echo_traceback, emit, emit_document, emit_json
from clustermgr.core.errors import ClusterMgrError, UsageError

if TYPE_CHECKING:
    from clustermgr.staging.spec import StagingSpec

USAGE = """\
usage: cmsub [sbatch options] [--stage-in SRC[:DEST]]... [--stage-out SRC[:DEST]]...
             [--overwrite] [--transport rsync|s3] [--region PROVIDER] [--json] [--dry-run]
             script [args]
       cmsub --status JOBID [--json]

Submits three Slurm jobs: a stage-in (SRC on this host -> DEST in the job's staging area),
your script (after the stage-in succeeded, on the staged region's burst nodes, with
$CMSUB_STAGE_DIR), and a stage-out (SRC in the staging area -> DEST here), which runs
however your script ends.

Where results go: DEST is a directory; each job's results land in a fresh DEST/<jobid>/
(a failed job's in DEST/<jobid>.partial/), all at once when verified: nothing already
in DEST is overwritten. --overwrite writes into DEST itself instead, replacing only the
files the job sends, each atomically.

Options: the same ones can be `#CMSUB` lines at the top of the script, like `#SBATCH`
lines; an option given on the command line replaces the script's lines for it. Every
word after the script is the script's argument.

Quota: [staging] quota_bytes per user, counting what you stage in plus what your earlier
jobs' staging areas still hold (freed by their stage-out).

Cancel: scancel the three job ids cmsub prints (stage-in, job, stage-out); cancelling
only the job still brings its results back, as partial.
"""
# array task ids as squeue prints them: 20_1, 20_[1-3]; the chain is the array's job 20
ARRAY_TASK = re.compile(r"(\d+)_(\d+|\[[\d,\-]+\])")
STATUS_COLUMNS = ("direction", "job", "state", "files", "verified", "bytes", "error")


def _guard(run: Callable[[], None], prog: str) -> None:
    debug = bool(os.environ.get("CLUSTERMGR_DEBUG"))
    try:
        run()
    except ClusterMgrError as exc:
        if debug:
            echo_traceback()
        text = str(exc)
        echo(text if text.startswith(f"{prog}:") else f"{prog}: {text}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(0)


def main() -> None:
    _guard(lambda: cmsub(sys.argv[1:]), "cmsub")


def cmsub(argv: list[str]) -> None:
    if not argv:
        echo(USAGE.rstrip("\n"), err=True)
        sys.exit(2)
    if argv[0] in ("-h", "--help"):
        emit_document(USAGE)
        return
    if argv[0] == "--status" or argv[0].startswith("--status="):
        _status(argv)
        return
    from clustermgr.staging.jobchain import with_dependency
    from clustermgr.staging.spec import parse_argv
    from clustermgr.staging.submit import submit

    spec = parse_argv(argv)
    for warning in spec.warnings:
        echo(warning, err=True)
    done = submit(AppContext(config_path=None, db_url=None).settings(), spec, Path.cwd())
    shown = {  # what a submission runs; the dependencies name the jobs they wait for
        "stage_in": done.argv.stage_in,
        "job": with_dependency(done.argv.job, "afterok", "<stage-in>"),
        "stage_out": with_dependency(done.argv.stage_out, "afterany", "<job>"),
    }
    if spec.as_json:
        row = done.row()
        if spec.dry_run:
            row["argv"] = shown
        emit_json(row)
        return
    plan = done.plan
    echo(
        f"cmsub: staging {plan.estimate.files_total} files, {plan.estimate.bytes_total:,} bytes "
        f"to {plan.region.provider} ({plan.transport})"
    )
    if spec.dry_run:
        for name, argv in shown.items():
            echo(f"{name}: sbatch {' '.join(shlex.quote(a) for a in argv)}")
        for dest in _results(spec, "<jobid>"):
            echo(f"results: {dest}")
        return
    if plan.resumes:
        echo(f"cmsub: resuming the failed stage-in of job {plan.resumes} (same data, its area)")
    echo(f"stage-in job  {done.ids.stage_in}")
    echo(f"job           {done.ids.job}")
    echo(f"stage-out job {done.ids.stage_out}")
    for dest in _results(spec, done.ids.job):
        echo(f"results:      {dest}")
    echo(f"status:       cmsub --status {done.ids.job}")


def _results(spec: StagingSpec, job: str) -> list[str]:
    """Where each stage-out DEST's results will be (a failed job's: `<job>.partial`)."""
    cwd = Path.cwd()
    shown: list[str] = []
    for item in spec.stage_out:
        dest = os.path.abspath(cwd / (item.dest or Path(item.source).name))
        where = f"{dest}/ (--overwrite)" if spec.overwrite else f"{dest}/{job}/"
        if where not in shown:
            shown.append(where)
    return shown


def _status(argv: list[str]) -> None:
    from clustermgr.staging import client

    words = [w for w in argv if w != "--json"]
    job = words[0].partition("=")[2] if "=" in words[0] else (words[1] if len(words) > 1 else "")
    if not job:
        raise UsageError("cmsub: --status needs a job id")
    array = ARRAY_TASK.fullmatch(job)
    if array:
        job = array[1]
    if not job.isdigit():
        raise UsageError(
            f"cmsub: --status {job!r}: give a Slurm job id (or an array task's, as 20_1)"
        )
    settings = AppContext(config_path=None, db_url=None).settings()
    if not settings.staging.regions:  # no service runs for it: nothing to ask
        raise UsageError("cmsub: staging is not configured on this cluster (no [staging] regions)")
    rows = client.call(settings.staging, "status", job=job)["transfers"]
    if not rows:
        raise UsageError(f"cmsub: none of your cmsub chains holds job {job}")
    table = [
        {
            "direction": f"stage-{r['direction']}",
            "job": r["transfer_job_id"],
            "state": r["state"],
            "files": r["files_total"],
            "verified": r["files_verified"],
            "bytes": r["bytes_total"],
            "error": r["error"],
        }
        for r in rows
    ]
    if "--json" in argv:
        emit_json({"job": rows[0]["job_id"], "stage_id": rows[0]["stage_id"], "transfers": rows})
        return
    echo(f"job {rows[0]['job_id']} (stage {rows[0]['stage_id']}, {rows[0]['transport']})")
    emit(table, STATUS_COLUMNS, False, "Transfers")


def transfer_main() -> None:
    _guard(lambda: transfer(sys.argv[1:]), "cmsub-transfer")


def transfer(argv: list[str]) -> None:
    from clustermgr.staging.progress import for_stdout
    from clustermgr.staging.run import run

    ids = [a.removeprefix("--transfer=") for a in argv if a.startswith("--transfer=")]
    if len(ids) != 1 or not ids[0].isdigit():
        raise UsageError("cmsub-transfer: usage: cmsub-transfer --transfer=ID")
    run(AppContext(config_path=None, db_url=None).settings(), int(ids[0]), for_stdout())

"""cmsub end to end without Slurm: the real `cmsub`, `cmsub-transfer` and `clustermgr
transfers` entry points, with a stand-in `sbatch`/`scontrol`/`scancel` in [slurm] bin_dir
(the edge of the world: they log their argv and print job ids), a local directory as the
region's staging area, the staging service (cm-scale's, started here as root on a socket of
the lab) in front of a database only root can open, and a user with no rights (`nobody`)
where rights matter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.db.database import Database
from clustermgr.staging.service import StagingService
from tests.conftest import REPO

BIN = Path(sys.executable).parent
NOBODY = 65534
FAKE_SLURM = """#!{python}
import os, sys
log = os.path.join(os.path.dirname(sys.argv[0]), "calls.log")
state = os.path.join(os.path.dirname(sys.argv[0]), "next_id")
tool = os.path.basename(sys.argv[0])
with open(log, "a") as handle:
    handle.write(repr([tool, *sys.argv[1:]]) + "\\n")
if tool == "sbatch":
    if os.environ.get("FAKE_SBATCH_FAIL") and "--hold" not in sys.argv:
        print("sbatch: error: Invalid partition name specified", file=sys.stderr)
        sys.exit(1)
    number = int(open(state).read()) if os.path.exists(state) else 1000
    open(state, "w").write(str(number + 1))
    print(f"{{number}};lab")
if tool == "scontrol" and sys.argv[1:3] == ["show", "job"] and os.environ.get("FAKE_JOB_STATE"):
    print(f"JobId={{sys.argv[-1]}} JobState={{os.environ['FAKE_JOB_STATE']}} ExitCode=1:0")
"""


@dataclass
class Lab:
    root: Path
    env: dict[str, str]
    area_root: Path
    bin_dir: Path

    def calls(self) -> list[list[str]]:
        log = self.bin_dir / "calls.log"
        if not log.exists():
            return []
        return [eval(line) for line in log.read_text().splitlines()]  # noqa: S307 (our repr)

    def run(
        self, tool: str, *args: str, cwd: Path | None = None, uid: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(BIN / tool), *args]
        if uid is not None:
            argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]
        return subprocess.run(
            argv,
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def lab() -> Iterator[Lab]:
    # under /tmp and open to everyone: `nobody` must reach the config and the area
    root = Path(tempfile.mkdtemp(prefix="cmsub-lab-"))
    try:
        root.chmod(0o777)
        bin_dir = root / "slurm-bin"
        bin_dir.mkdir()
        for tool in ("sbatch", "scontrol", "scancel"):
            path = bin_dir / tool
            path.write_text(FAKE_SLURM.format(python=sys.executable))
            path.chmod(0o755)
        bin_dir.chmod(0o777)
        area_root = root / "staging"
        area_root.mkdir(mode=0o777)
        area_root.chmod(0o1777)
        config = root / "clustermgr.toml"
        config.write_text(
            f'[database]\nurl = "sqlite:///{root}/cm.db"\n'
            f'[slurm]\nbin_dir = "{bin_dir}"\n'
            '[[providers]]\nname = "lab"\ntype = "local"\nregion = "lab"\n'
            f'[staging]\ndata_mover_partition = "movers"\nquota_bytes = 1000000\n'
            f'socket = "{root}/run/cmsub.sock"\n'
            f'transfer_command = "{BIN / "cmsub-transfer"}"\n'
            f'[[staging.regions]]\nprovider = "lab"\npartition = "cloud"\n'
            f'features = ["lab"]\nrsync_target = "{area_root}"\n'
        )
        env = {**os.environ, "CLUSTERMGR_CONFIG": str(config), "PYTHONPATH": str(REPO)}
        env.pop("CLUSTERMGR_DB", None)
        done = subprocess.run(
            [str(BIN / "clustermgr"), "db", "upgrade"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        os.chmod(root / "cm.db", 0o600)  # root's alone: users go through the service
        (root / "run").mkdir(mode=0o755)
        database = Database(f"sqlite:///{root}/cm.db")
        service = StagingService(load_settings(config), database)
        service.start()
        try:
            yield Lab(root, env, area_root, bin_dir)
        finally:
            service.stop()
            database.dispose()
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def job_script(where: Path) -> Path:
    script = where / "job.sh"
    script.write_text(
        "#!/bin/sh\n#SBATCH -N 1\n#CMSUB --stage-out results\n"
        'cat "$CMSUB_STAGE_DIR/input/a b.txt"\n'
    )
    return script


def submit(lab: Lab, *extra: str) -> dict[str, object]:
    data = lab.root / "data"
    data.mkdir(exist_ok=True)
    (data / "a b.txt").write_text("hello")
    (data / "$(x);").write_text("shell")
    job_script(lab.root)
    done = lab.run("cmsub", "--time=5", "--stage-in", f"{data}:input", *extra, "--json", "job.sh")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_chain_is_submitted_moved_verified_and_cleaned(lab: Lab) -> None:
    chain = submit(lab)
    assert (chain["stage_in_job"], chain["job"], chain["stage_out_job"]) == ("1000", "1001", "1002")
    calls = lab.calls()
    assert calls[0][:4] == ["sbatch", "--parsable", "--hold", "--partition=movers"]
    assert calls[1][:4] == [
        "sbatch",
        "--parsable",
        "--dependency=afterok:1000",
        "--partition=cloud",
    ]
    assert "--constraint=lab" in calls[1] and calls[1][-1] == "job.sh"
    assert calls[2][:3] == ["sbatch", "--parsable", "--dependency=afterany:1001"]
    assert calls[3] == ["scontrol", "release", "1000"]
    transfer_in = calls[0][-1]
    transfer_out = calls[2][-1]

    moved = lab.run("cmsub-transfer", transfer_in)
    assert moved.returncode == 0, moved.stderr
    assert "all verified" in moved.stdout
    area = Path(str(chain["stage_dir"]))
    assert (area / "input" / "a b.txt").read_text() == "hello"
    assert (area / "input" / "$(x);").read_text() == "shell"
    (area / "results").mkdir()
    (area / "results" / "answer").write_text("42")  # what the job wrote

    back = lab.run("cmsub-transfer", transfer_out)
    assert back.returncode == 0, back.stderr
    # into a fresh DEST/<jobid>/, all at once
    assert (lab.root / "results" / "1001" / "answer").read_text() == "42"
    assert sorted(os.listdir(lab.root / "results")) == ["1001"]
    assert "results in" in back.stdout
    assert not area.exists()  # retention 0: cleaned at once

    status = lab.run("cmsub", "--status", "1001", "--json")
    rows = json.loads(status.stdout)["transfers"]
    assert [(r["direction"], r["state"], r["files_verified"]) for r in rows] == [
        ("in", "done", 2),
        ("out", "done", 1),
    ]
    assert all(r["cleaned_at"] for r in rows)
    listed = lab.run("clustermgr", "transfers", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {r["job_id"] for r in json.loads(listed.stdout)} == {"1001"}
    shown = lab.run("clustermgr", "transfers", "show", "1000")
    assert "[stage-in]" in shown.stdout and "[stage-out]" in shown.stdout


def test_bad_input_is_one_line_exit_2_and_nothing_submitted(lab: Lab) -> None:
    job_script(lab.root)
    (lab.root / "overlap.sh").write_text(
        f"#!/bin/sh\n#CMSUB --stage-in {lab.root}/job.sh:input --stage-in job.sh:input/x\nrun\n"
    )
    big = lab.root / "big"
    big.write_bytes(b"x" * 2_000_000)
    for argv, message in [
        (["--stage-in", "nope", "job.sh"], "does not exist"),
        (["--stage-in", f"{big}:../x", "job.sh"], "leaves the staging area"),
        (["--stage-in", f"{big}:/abs", "job.sh"], "is absolute"),
        (["--stage-in", str(big), "job.sh"], "1,000,000-byte quota"),
        (["-p", "other", "job.sh"], "--partition is set by cmsub"),
        (["--region", "mars", "--stage-in", "job.sh", "job.sh"], "--region 'mars'"),
        (["--stage-out", f"results:{big}", "job.sh"], f"DEST '{big}' is an existing file"),
        (["overlap.sh"], "overlap.sh:2: --stage-in DEST 'input/x' overlaps 'input'"),
    ]:
        done = lab.run("cmsub", *argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert message in done.stderr, (argv, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
    assert lab.calls() == []


def test_a_failed_submission_cancels_what_was_submitted(lab: Lab) -> None:
    data = lab.root / "d"
    data.write_text("x")
    job_script(lab.root)
    lab.env["FAKE_SBATCH_FAIL"] = "1"
    done = lab.run("cmsub", "--stage-in", str(data), "job.sh")
    assert done.returncode == 1
    assert "Invalid partition" in done.stderr
    assert lab.calls()[-1] == ["scancel", "1000"]
    listed = lab.run("clustermgr", "transfers", "list", "--json")
    assert json.loads(listed.stdout) == []


def test_an_unprivileged_user_cannot_stage_what_they_cannot_read(lab: Lab) -> None:
    secret = lab.root / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    home = lab.root / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    job_script(home)
    refused = lab.run("cmsub", "--stage-in", str(secret), "job.sh", cwd=home, uid=NOBODY)
    assert refused.returncode == 2, refused.stderr
    assert "you cannot read" in refused.stderr and str(secret) in refused.stderr

    # rights taken away after submission: the transfer job (as the user) fails to read it,
    # records why and cancels the job and the stage-out
    secret.chmod(0o644)
    done = lab.run("cmsub", "--stage-in", str(secret), "--json", "job.sh", cwd=home, uid=NOBODY)
    assert done.returncode == 0, done.stderr
    chain = json.loads(done.stdout)
    secret.chmod(0o600)
    transfer_in = lab.calls()[0][-1]
    failed = lab.run("cmsub-transfer", transfer_in, uid=NOBODY)
    assert failed.returncode == 1
    assert "permission denied" in failed.stderr
    assert lab.calls()[-1] == ["scancel", chain["job"], chain["stage_out_job"]]
    status = lab.run("cmsub", "--status", str(chain["job"]), uid=NOBODY)
    assert "failed" in status.stdout and "cancelled" in status.stdout
    assert "stage-in failed" in status.stdout

    # root may not run a user's transfer either: the service checks it is the caller's
    as_root = lab.run("cmsub-transfer", transfer_in)
    assert as_root.returncode == 2 and "is not yours (root)" in as_root.stderr


def test_a_resubmitted_stage_in_resumes_where_the_failed_one_stopped(lab: Lab) -> None:
    home = lab.root / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    job_script(home)
    tree = home / "tree"
    tree.mkdir()
    for index in range(5):
        (tree / f"f{index}").write_bytes(os.urandom(20_000))
    for path in (tree, *tree.iterdir()):
        os.chown(path, NOBODY, NOBODY)
    first = lab.run("cmsub", "--stage-in", f"{tree}:in", "--json", "job.sh", cwd=home, uid=NOBODY)
    assert first.returncode == 0, first.stderr
    chain = json.loads(first.stdout)
    (tree / "f3").chmod(0)  # after the checks; its owner cannot read it: rsync fails part-way
    failed = lab.run("cmsub-transfer", lab.calls()[0][-1], uid=NOBODY)
    assert failed.returncode == 1 and "exited 23" in failed.stderr
    area = Path(str(chain["stage_dir"]))
    assert sorted(p.name for p in (area / "in").iterdir()) == ["f0", "f1", "f2", "f4"]

    (tree / "f3").chmod(0o644)
    again = lab.run("cmsub", "--stage-in", f"{tree}:in", "--json", "job.sh", cwd=home, uid=NOBODY)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["resumes"] == chain["job"]
    assert second["stage_dir"] == chain["stage_dir"]  # the same area
    transfer_in = next(c for c in lab.calls()[len(lab.calls()) - 4 :] if "--hold" in c)[-1]
    resumed = lab.run("cmsub-transfer", transfer_in, uid=NOBODY)
    assert resumed.returncode == 0, resumed.stderr
    status = lab.run("cmsub", "--status", str(second["job"]), "--json", uid=NOBODY)
    rows = json.loads(status.stdout)
    stage_in = rows["transfers"][0]
    assert (stage_in["files_total"], stage_in["files_done"]) == (5, 1)  # only f3 was sent
    assert stage_in["files_verified"] == 5
    assert stage_in["bytes_done"] == 20_000


def test_dry_run_prints_the_chain_and_submits_nothing(lab: Lab) -> None:
    data = lab.root / "d d"
    data.write_text("x")
    job_script(lab.root)
    done = lab.run("cmsub", "--dry-run", "--json", "--stage-in", f"{data}:in", "job.sh", "a b")
    assert done.returncode == 0, done.stderr
    argv = json.loads(done.stdout)["argv"]
    assert argv["job"][1] == "--dependency=afterok:<stage-in>"
    assert argv["job"][-2:] == ["job.sh", "a b"]
    assert argv["stage_out"][1] == "--dependency=afterany:<job>"
    assert lab.calls() == []
    assert json.loads(lab.run("clustermgr", "transfers", "list", "--json").stdout) == []
    plain = lab.run("cmsub", "--dry-run", "--stage-in", f"{data}:in", "job.sh", "a b")
    assert "job: sbatch --parsable '--dependency=afterok:<stage-in>'" in plain.stdout
    job_line = next(line for line in plain.stdout.splitlines() if line.startswith("job: "))
    assert job_line.endswith("job.sh 'a b'")


def test_a_rerun_keeps_the_earlier_results_and_a_failed_job_comes_back_partial(
    lab: Lab,
) -> None:
    out = lab.root / "out"
    out.mkdir()
    (out / "all.txt").write_text("the user's own")
    runs = []
    for answer, job_state in (("first", ""), ("second", ""), ("half", "FAILED")):
        chain = submit(lab, "--stage-out", f"results:{out}")
        transfer_in, transfer_out = lab.calls()[-4][-1], lab.calls()[-2][-1]
        assert lab.run("cmsub-transfer", transfer_in).returncode == 0
        area = Path(str(chain["stage_dir"]))
        (area / "results").mkdir()
        (area / "results" / "all.txt").write_text(answer)
        lab.env["FAKE_JOB_STATE"] = job_state
        back = lab.run("cmsub-transfer", transfer_out)
        assert back.returncode == 0, back.stderr
        runs.append(str(chain["job"]))
    first, second, failed = runs
    assert (out / first / "all.txt").read_text() == "first"
    assert (out / second / "all.txt").read_text() == "second"
    assert (out / f"{failed}.partial" / "all.txt").read_text() == "half"
    assert "(the job failed: partial)" in back.stdout
    assert (out / "all.txt").read_text() == "the user's own"
    assert sorted(os.listdir(out)) == sorted(["all.txt", first, second, f"{failed}.partial"])


def test_sbatch_conventions_usage_status_of_an_array_task_and_trailing_options(
    lab: Lab,
) -> None:
    bare = lab.run("cmsub")
    assert bare.returncode == 2 and bare.stderr.startswith("usage: cmsub")
    helped = lab.run("cmsub", "--help")
    assert helped.returncode == 0
    for said in ("DEST/<jobid>/", "quota_bytes", "scancel", "--overwrite"):
        assert said in helped.stdout, said
    chain = submit(lab)
    for task in (f"{chain['job']}_1", f"{chain['job']}_[1-3]"):
        status = lab.run("cmsub", "--status", task, "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["job"] == chain["job"]
    bad = lab.run("cmsub", "--status", "20_x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    # after the script, --dry-run is the script's: a warning, and the chain is submitted
    before = len(lab.calls())
    data = lab.root / "data"
    done = lab.run("cmsub", "--stage-in", f"{data}:input", "job.sh", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "--dry-run comes after the script 'job.sh'" in done.stderr
    assert "passed to the script" in done.stderr
    assert lab.calls()[before + 1][-2:] == ["job.sh", "--dry-run"]

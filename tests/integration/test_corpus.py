"""The hostile-input corpus (tests/corpus/): one file per case, each naming the first line
of the error it must produce. Every case: one clear line, the right exit code, nothing
written (no database is created by `config check`, a bad spool file is moved aside, never
deleted), and no traceback.

- config/*.toml       `clustermgr config check --no-slurm` on the file: exit 2, one line
- policies/*.py       a policy file: loading ones through `config check` (exit 2, one
                      line); `decide:` ones through the policy runner (the cycle is void,
                      the error names the policy)
- slurm/*.toml        what a Slurm client printed: output that cannot be read at all fails
                      the snapshot with one line; one bad line or record (`skipped: `) is
                      left out with one warning naming its job or node and the rest is
                      read; hostile but readable (`read`) is read whole; `ok`: unknown
                      fields are ignored
- spool/*.toml        a request file in cm-scale's spool: skipped, moved aside with one line
- resume_file/*.toml  a SLURM_RESUME_FILE: ignored, the hostlist argument still counts
"""

from __future__ import annotations

import logging
import stat
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clustermgr.config import PolicyRef
from clustermgr.core.errors import WorkloadError
from clustermgr.policy import ClusterView
from clustermgr.policy.chain import PolicyRunner
from clustermgr.policy.loader import load_chain
from clustermgr.workload.hooks import parse_resume_file, read_requests, reject_malformed
from clustermgr.workload.slurm import SlurmCli
from tests.conftest import REPO, run_cli

CORPUS = REPO / "tests" / "corpus"
BASE_CONFIG = """[cluster]
name = "corpus"
[policy]
timeout_s = 0.5
chain = [{{ name = "corpus", path = "{path}" }}]
"""


def cases(kind: str, suffix: str = ".toml") -> list[Path]:
    return sorted((CORPUS / kind).glob(f"*{suffix}"))


def expectation(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode()
    assert first.startswith("# expect: "), f"{path.name}: no `# expect:` first line"
    return first.removeprefix("# expect: ").replace("FILE", str(path))


def test_the_corpus_has_at_least_forty_cases() -> None:
    total = sum(len(list((CORPUS / kind).iterdir())) for kind in ("config", "policies", "slurm"))
    total += len(cases("spool")) + len(cases("resume_file"))
    assert total >= 40, total


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("case", cases("config"), ids=lambda p: p.stem)
def test_bad_config(case: Path, tmp_path: Path) -> None:
    db = tmp_path / "state" / "cm.db"
    done = run_cli(
        "--config",
        str(case),
        "config",
        "check",
        "--no-slurm",
        env={"CLUSTERMGR_DB": f"sqlite:///{db}"},
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = one_error_line(done.stderr)
    assert line.startswith(f"clustermgr: error: {expectation(case)}"), line
    assert "OK" not in done.stdout
    assert not db.parent.exists(), "config check wrote a database"


@pytest.mark.parametrize("case", cases("policies", ".py"), ids=lambda p: p.stem)
def test_bad_policy(case: Path, tmp_path: Path) -> None:
    expect = expectation(case)
    if expect.startswith("decide: "):
        [policy] = load_chain([PolicyRef(name="corpus", path=case)])
        view = ClusterView(now=datetime.now(UTC), templates={}, nodes={})
        result = PolicyRunner([policy], 0.5).run(view)
        assert result.error is not None and result.error.startswith(expect.removeprefix("decide: "))
        assert result.decision.launches == () and result.decision.stops == ()
        return
    config = tmp_path / "c.toml"
    config.write_text(BASE_CONFIG.format(path=case))
    done = run_cli("--config", str(config), "config", "check", "--no-slurm")
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = one_error_line(done.stderr)
    assert line.startswith(f"clustermgr: error: {expect}"), line


def fake_slurm(bin_dir: Path, command: str, output: bytes) -> None:
    """Slurm's clients as the edge of the world: the one under test prints the case, the
    others print a valid empty answer."""
    bin_dir.mkdir()
    answers = {
        "sinfo": b'{"nodes": []}',
        "squeue-pending": b"",
        "squeue-running": b"",
    }
    answers[command] = output
    for name, answer in answers.items():
        (bin_dir / f"{name}.out").write_bytes(answer)
    squeue = (
        '#!/bin/sh\ncase "$*" in *PENDING*) exec cat "{d}/squeue-pending.out";; esac\n'
        'exec cat "{d}/squeue-running.out"\n'
    )
    scripts = {"sinfo": '#!/bin/sh\nexec cat "{d}/sinfo.out"\n', "squeue": squeue}
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text.format(d=bin_dir))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("case", cases("slurm"), ids=lambda p: p.stem)
def test_bad_slurm_output(case: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec = tomllib.loads(case.read_text())
    output = bytes.fromhex(spec["output_hex"]) if "output_hex" in spec else spec["output"].encode()
    fake_slurm(tmp_path / "bin", spec["command"], output)
    slurm = SlurmCli(tmp_path / "bin", timeout_s=10)
    expect: str = spec["expect"]
    if expect == "ok":
        assert "gpu-1" in slurm.snapshot().nodes
        return
    if expect == "read" or expect.startswith("skipped: "):
        with caplog.at_level(logging.WARNING, "clustermgr.workload"):
            snapshot = slurm.snapshot()
        read = {
            "sinfo": list(snapshot.nodes),
            "squeue-pending": [job.job_id for job in snapshot.pending],
            "squeue-running": [job.job_id for job in snapshot.running],
        }[spec["command"]]
        assert read == spec["read"]  # the rest of the output is still read
        warnings = [record.getMessage() for record in caplog.records]
        if expect == "read":
            assert warnings == []
        else:
            [warning] = warnings  # one warning, naming the job or node
            assert warning.startswith(expect.removeprefix("skipped: ")), warning
        return
    with pytest.raises(WorkloadError) as caught:
        slurm.snapshot()
    message = str(caught.value)
    assert "\n" not in message and message.startswith(expect), message


@pytest.mark.parametrize("case", cases("spool"), ids=lambda p: p.stem)
def test_bad_spool_file(case: Path, tmp_path: Path) -> None:
    spec = tomllib.loads(case.read_text())
    spool = tmp_path / "spool"
    spool.mkdir()
    bad = spool / "1700000000.000000-1-resume.json"
    bad.write_text(spec["content"])
    good = spool / "1700000001.000000-2-resume.json"
    good.write_text('{"kind": "resume", "nodes": ["gpu-2"], "at": 1700000001.0}')
    assert [r.nodes for r in read_requests(spool)] == [("gpu-2",)]  # the good one still counts
    [line] = reject_malformed(spool)
    assert line.startswith(f"spool: {bad.name}: {spec['expect']}"), line
    assert line.endswith(f"moved aside to {bad.name}.rejected")
    assert not bad.exists() and (spool / f"{bad.name}.rejected").read_text() == spec["content"]
    assert good.exists() and reject_malformed(spool) == []


@pytest.mark.parametrize("case", cases("resume_file"), ids=lambda p: p.stem)
def test_bad_resume_file_is_ignored(case: Path) -> None:
    assert parse_resume_file(tomllib.loads(case.read_text())["content"]) == {}

"""Slurm's power-save hooks as Slurm runs them: a child process with a hostlist argument."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from clustermgr.workload.hooks import read_requests

CONFIG = """
[cluster]
name = "t"
[daemon]
state_dir = "{state}"
[[providers]]
name = "local"
type = "local"
region = "here"
[[templates]]
name = "t1"
provider = "local"
partition = "cloud"
nodes = "cloud[1-4]"
instance_types = ["local.cpu"]
image = "local"
cpus = 2
memory_mb = 900
"""


@pytest.fixture
def state(tmp_path: Path) -> tuple[Path, Path]:
    state_dir = tmp_path / "state"
    (state_dir / "spool").mkdir(parents=True)
    (state_dir / "heartbeat.json").write_text("{}")  # a live cm-scale
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(state=state_dir))
    return config, state_dir


def hook(program: str, hostlist: str, config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name(program)
    return subprocess.run(
        [str(exe), hostlist],
        capture_output=True,
        text=True,
        env={**os.environ, "CLUSTERMGR_CONFIG": str(config), **env},
        timeout=30,
        check=False,
    )


def test_resume_records_request_with_jobs_and_pokes_daemon(
    state: tuple[Path, Path], tmp_path: Path
) -> None:
    config, state_dir = state
    resume_file = tmp_path / "resume.json"
    resume_file.write_text(
        json.dumps({"jobs": [{"job_id": 7, "nodes": "cloud[1-2]"}], "all_nodes": "cloud[1-2]"})
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as daemon:
        daemon.bind(str(state_dir / "cm-scale.sock"))
        daemon.settimeout(5)
        done = hook(
            "clustermgr-slurm-resume", "cloud[1-2]", config, SLURM_RESUME_FILE=str(resume_file)
        )
        assert done.returncode == 0, done.stderr
        assert daemon.recv(16) == b"wake"
    [request] = read_requests(state_dir / "spool")
    assert request.kind == "resume" and request.nodes == ("cloud1", "cloud2")
    assert request.jobs == {"7": ("cloud1", "cloud2")}


def test_suspend_and_resume_fail_without_a_daemon(state: tuple[Path, Path]) -> None:
    config, state_dir = state
    assert hook("clustermgr-slurm-suspend", "cloud3", config).returncode == 0
    assert hook("clustermgr-slurm-resume-fail", "cloud4", config).returncode == 0
    kinds = sorted((r.kind, r.nodes) for r in read_requests(state_dir / "spool"))
    assert kinds == [("resume-fail", ("cloud4",)), ("suspend", ("cloud3",))]


def test_foreign_node_names_touch_nothing(state: tuple[Path, Path]) -> None:
    config, state_dir = state
    done = hook("clustermgr-slurm-resume", "cloud[4-5],onprem1", config)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "clustermgr: error: not cloud nodes of any template: cloud5,onprem1 (nothing recorded)"
    )
    assert list((state_dir / "spool").iterdir()) == []
    bad = hook("clustermgr-slurm-resume", "cloud[2-", config)
    assert bad.returncode == 2 and "is not a Slurm hostlist" in bad.stderr


def test_missing_spool_says_what_to_do(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    (tmp_path / "absent").mkdir()
    (tmp_path / "absent" / "heartbeat.json").write_text("{}")
    config.write_text(CONFIG.format(state=tmp_path / "absent"))
    done = hook("clustermgr-slurm-resume", "cloud1", config)
    assert done.returncode == 2
    assert "cannot write the request into" in done.stderr and "cm-scale creates it" in done.stderr


PROBE = """
import sys
from clustermgr.cli.hooks_entry import resume
sys.argv = ["clustermgr-slurm-resume", "cloud1"]
try:
    resume()
except SystemExit as exc:
    print(exc.code)
print(" ".join(sorted(sys.modules)))
"""
HEAVY = ("click", "pydantic", "sqlalchemy", "rich", "alembic", "boto3", "logging")


def test_resume_hook_skips_the_cli_and_validation_libraries(state: tuple[Path, Path]) -> None:
    config, state_dir = state
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env={**os.environ, "CLUSTERMGR_CONFIG": str(config)},
        timeout=30,
        check=False,
    )
    code, modules = done.stdout.splitlines()
    assert code == "0", done.stderr
    loaded = modules.split()
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    assert "clustermgr.config" not in loaded and "clustermgr.cli.main" not in loaded
    assert [r.nodes for r in read_requests(state_dir / "spool")] == [("cloud1",)]


def test_hook_without_a_hostlist_answers_like_the_cli(state: tuple[Path, Path]) -> None:
    config, _ = state
    exe = Path(sys.executable).with_name("clustermgr-slurm-resume")
    done = subprocess.run(
        [str(exe)],
        capture_output=True,
        text=True,
        env={**os.environ, "CLUSTERMGR_CONFIG": str(config)},
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "Missing argument 'HOSTLIST'" in done.stderr


def test_resume_without_a_live_daemon_powers_down_through_scontrol(tmp_path: Path) -> None:
    """No heartbeat: the hook hands the nodes back to Slurm itself (here scontrol is absent)."""
    state_dir = tmp_path / "state"
    (state_dir / "spool").mkdir(parents=True)
    config = tmp_path / "c.toml"
    no_slurm = tmp_path / "no-slurm-bin"
    config.write_text(CONFIG.format(state=state_dir) + f'[slurm]\nbin_dir = "{no_slurm}"\n')
    done = hook("clustermgr-slurm-resume", "cloud1", config)
    assert done.returncode == 1
    assert done.stderr.startswith("clustermgr: error: cm-scale is not running and scontrol failed")
    assert list((state_dir / "spool").iterdir()) == []

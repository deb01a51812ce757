"""`nodes sync` and `config check` against a real slurmctld."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cannot_run, run_cli
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

BIN = Path(sys.executable).parent  # clustermgr's hooks: what `config check` wants to see

CONFIG = """
[cluster]
name = "sync"
[slurm]
onprem_partitions = ["batch"]
[[providers]]
name = "local"
type = "local"
region = "here"
[[templates]]
name = "burst"
provider = "local"
partition = "cloud"
nodes = "{nodes}"
instance_types = ["local.gpu2"]
image = "local"
cpus = {cpus}
memory_mb = 1000
gpu_model = "fake"
gpus = 2
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    if os.geteuid() != 0:
        cannot_run("needs root to run slurmctld")
    groups = [
        NodeGroup("on[1-2]", cpus=2, memory_mb=1000, cloud=False, address="127.0.0.1"),
        NodeGroup("cloud[1-4]", cpus=2, memory_mb=1000, gpus=2, gpu_model="fake"),
    ]
    partitions = [Partition("batch", "on[1-2]", default=True), Partition("cloud", "cloud[1-4]")]
    hooks = {
        f"{kind.replace('-', '_')}_program": str(BIN / f"clustermgr-slurm-{kind}")
        for kind in ("resume", "suspend", "resume-fail")
    }
    with SlurmLab(tmp_path / "slurm", groups, partitions, resume_timeout=3600, **hooks) as running:
        yield running


def env_for(
    lab: SlurmLab, tmp_path: Path, nodes: str = "cloud[1-4]", cpus: int = 2
) -> dict[str, str]:
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(nodes=nodes, cpus=cpus))
    return {
        **lab.env,
        "CLUSTERMGR_CONFIG": str(config),
        "CLUSTERMGR_DB": f"sqlite:///{tmp_path / 'cm.db'}",
    }


def test_sync_registers_onprem_nodes_from_slurm_and_cloud_slots(
    lab: SlurmLab, tmp_path: Path
) -> None:
    env = env_for(lab, tmp_path)
    assert run_cli("db", "upgrade", env=env).returncode == 0
    first = run_cli("nodes", "sync", env=env)
    assert first.returncode == 0, first.stderr
    assert "6 added" in first.stdout
    again = run_cli("nodes", "sync", env=env)
    assert "0 added" in again.stdout and "0 retired" in again.stdout
    rows = {r["name"]: r for r in json.loads(run_cli("nodes", "list", "--json", env=env).stdout)}
    assert rows["on1"]["kind"] == "onprem" and rows["on1"]["cpus"] == 2
    assert rows["on1"]["partitions"] == "batch"
    assert rows["cloud3"]["kind"] == "cloud" and rows["cloud3"]["template"] == "burst"
    assert rows["cloud3"]["state"] == "POWERED_DOWN"


def test_config_check_matches_and_reports_each_mismatch(lab: SlurmLab, tmp_path: Path) -> None:
    env = env_for(lab, tmp_path)
    assert run_cli("db", "upgrade", env=env).returncode == 0
    ok = run_cli("config", "check", env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "slurm: running configuration matches the templates" in ok.stdout
    bad = env_for(lab, tmp_path, nodes="cloud[1-6]", cpus=4)
    done = run_cli("config", "check", env=bad)
    assert done.returncode == 2
    problems = done.stdout.strip().splitlines()[2:]  # after the OK and policy chain lines
    assert problems == [
        "template burst: nodes cloud[5-6] are not in slurm.conf (see `clustermgr slurm conf`)",
        "template burst: node cloud1: Slurm has CPUs=2, the template says 4",
    ]
    refused = run_cli("nodes", "list", env=bad)  # the CLI itself still works
    assert refused.returncode == 0
    # the commands that go on despite a mismatch say so on stderr (JSON stays clean)
    cm_scale = str(BIN / "cm-scale")
    for argv in (
        [sys.executable, "-m", "clustermgr", "nodes", "sync"],
        [sys.executable, "-m", "clustermgr", "policy", "dry-run", "--json"],
        [cm_scale, "--dry-run", "--json"],
    ):
        warned = subprocess.run(argv, env={**os.environ, **bad}, capture_output=True, text=True)
        assert warned.returncode == 0, (argv, warned.stderr)
        assert f"warning: {problems[0]}" in warned.stderr, (argv, warned.stderr)
        assert "cm-scale refuses to start until they are fixed" in warned.stderr
        if "--json" in argv:
            json.loads(warned.stdout)
    quiet = run_cli("nodes", "sync", env=env_for(lab, tmp_path))  # the matching config again
    assert quiet.returncode == 0 and "warning" not in quiet.stderr, quiet.stderr

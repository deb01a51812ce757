"""`clustermgr health-check` against a real slurmctld, with a fake nvidia-smi on PATH."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.workload.gpu_health import health_check
from tests.conftest import cannot_run
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

FAKE_SMI = """#!/bin/sh
# fake nvidia-smi: {count} healthy A100s
i=0
while [ $i -lt {count} ]; do
  echo "NVIDIA A100-SXM4-80GB, {ecc}, No, No"
  i=$((i+1))
done
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    if os.geteuid() != 0:
        cannot_run("needs root to run slurmctld")
    groups = [
        NodeGroup("on1", cpus=2, memory_mb=1000, cloud=False, address="127.0.0.1"),
        NodeGroup("gpu[1-2]", cpus=2, memory_mb=1000, gpus=8, gpu_model="a100"),
    ]
    partitions = [Partition("batch", "on1", default=True), Partition("gpu", "gpu[1-2]")]
    with SlurmLab(tmp_path / "slurm", groups, partitions) as running:
        yield running


def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int, ecc: int = 0) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(count=count, ecc=ecc))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_onprem_node_is_left_alone(
    lab: SlurmLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(lab.conf_path))
    result = health_check("on1", Path("/usr/bin"), tmp_path / "marks")
    assert (result.checked, result.action) == (False, "none")


def test_missing_gpu_at_boot_powers_down_and_later_failures_drain(
    lab: SlurmLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(lab.conf_path))
    fake_gpus(tmp_path, monkeypatch, count=7)
    boot = health_check("gpu1", Path("/usr/bin"), tmp_path / "marks")
    assert boot.boot and boot.action == "power-down"
    assert boot.problems[0] == "7 of 8 GPUs visible"
    assert lab.node_fields("gpu1")["Reason"].startswith("(Code:HEALTH)")
    fake_gpus(tmp_path, monkeypatch, count=8, ecc=3)
    later = health_check("gpu2", Path("/usr/bin"), tmp_path / "marks")
    assert later.boot  # gpu2's first check
    fine = health_check("gpu2", Path("/usr/bin"), tmp_path / "marks")
    assert not fine.boot and fine.action == "drain"
    assert "GPU 0: 3 uncorrected ECC errors" in fine.problems
    assert "DRAIN" in lab.node_fields("gpu2")["State"]
    reasons = lab.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
    assert "gpu2|(Code:HEALTH) GPU 0: 3 uncorrected ECC errors" in reasons


def test_healthy_node_passes(
    lab: SlurmLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(lab.conf_path))
    fake_gpus(tmp_path, monkeypatch, count=8)
    result = health_check("gpu1", Path("/usr/bin"), tmp_path / "marks")
    assert result.checked and result.problems == () and result.action == "none"

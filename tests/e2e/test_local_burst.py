"""Jobs burst onto local-provider nodes (real slurmd in network namespaces) through
repeated `cm-scale --once`, complete, and the nodes scale back down. Slurm mode here (with
a 2-node job and GPUs); policy mode runs through the daemon on every cloud in test_clouds.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import slurm_user_for_hooks
from tests.labs.burstlab import BurstLab, BurstLabSpec


def burst_jobs(lab: BurstLab) -> list[str]:
    jobs = [lab.sbatch("--wrap", "sleep 1; hostname") for _ in range(4)]
    jobs.append(lab.sbatch("-N", "2", "--wrap", "srun hostname"))
    jobs.append(lab.sbatch("--gres=gpu:2", "--wrap", "echo GPUS=$CUDA_VISIBLE_DEVICES"))
    return jobs


def all_completed(lab: BurstLab, jobs: list[str]) -> bool:
    return all(lab.job_field(job, "JobState") == "COMPLETED" for job in jobs)


@pytest.fixture
def slurm_mode_lab(lab_dir: Path) -> Iterator[BurstLab]:
    spec = BurstLabSpec(demand_mode="slurm", slurm_user=slurm_user_for_hooks())
    lab = BurstLab(lab_dir, spec)
    try:
        yield lab.start()
    finally:
        lab.stop()


def test_slurm_mode_jobs_complete_then_nodes_power_down(slurm_mode_lab: BurstLab) -> None:
    lab = slurm_mode_lab
    jobs = burst_jobs(lab)
    lab.run_until(lambda: all_completed(lab, jobs), timeout_s=300)
    assert lab.job_field(jobs[4], "NumNodes") == "2"
    assert "GPUS=0,1" in lab.job_output(jobs[5])
    nodes = json.loads(lab.clustermgr("nodes", "list", "--json").stdout)
    assert {n["template"] for n in nodes} == {"local-gpu"}

    def scaled_down() -> bool:
        states = lab.node_states()
        return set(states.values()) == {"idle~"} and lab.instances() == []

    lab.run_until(scaled_down, timeout_s=180, pause_s=3)
    history = json.loads(lab.clustermgr("events", "--since", "1h", "--json").stdout)
    assert any(e["new_state"] == "BOOTING" for e in history)
    assert any(e["new_state"] == "POWERED_DOWN" and e["old_state"] == "STOPPING" for e in history)


def test_slurm_mode_two_node_job_is_launched_together_from_the_resume_file(
    slurm_mode_lab: BurstLab,
) -> None:
    """The template has GPUs, so all-or-nothing: Slurm's resume hook gets the job's two
    nodes in SLURM_RESUME_FILE, and cm-scale launches them as one order for that job."""
    lab = slurm_mode_lab
    job = lab.sbatch("-N", "2", "--wrap", "srun hostname")
    lab.run_until(lambda: all_completed(lab, [job]), timeout_s=240)
    assert lab.job_field(job, "NumNodes") == "2"
    events = json.loads(lab.clustermgr("events", "--since", "1h", "--json").stdout)
    together = f"Slurm resume request for job {job}: 2 nodes together"
    launching = [e for e in events if e["new_state"] == "LAUNCHING"]
    assert len(launching) == 2 and {e["reason"] for e in launching} == {together}, launching

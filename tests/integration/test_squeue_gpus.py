"""A real slurmctld's queue, read as cm-scale reads it: every way of asking for GPUs gives
the node count Slurm itself would allocate on 2-GPU nodes (issue 26: `--gpus=3` was judged
as 3 GPUs per node and never burst)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from clustermgr.policy.fit import nodes_on, why_not
from clustermgr.workload.slurm import SlurmCli
from tests.conftest import cannot_run
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab
from tests.unit.test_policies import template

pytestmark = pytest.mark.integration

ASKS = {  # sbatch options -> (nodes on a 2-GPU template, GPUs in all)
    ("--gpus=3",): (2, 3),
    ("-N", "2", "--gpus=3"): (2, 3),
    ("--gpus-per-node=2", "-N", "2"): (2, 4),
    ("--gres=gpu:a100:2",): (1, 2),
    ("--gpus-per-task=1", "-n", "3"): (2, 3),
    ("--gpus-per-task=2", "-n", "2", "--ntasks-per-node=1"): (2, 4),
}


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    if os.geteuid() != 0:
        cannot_run("needs root to run slurmctld")
    groups = [NodeGroup("g[1-6]", cpus=4, memory_mb=4000, gpus=2, gpu_model="a100")]
    with SlurmLab(tmp_path / "slurm", groups, [Partition("cloud", "g[1-6]", default=True)]) as lab:
        yield lab


def test_every_gpu_request_spreads_as_slurm_spreads_it(lab: SlurmLab) -> None:
    ids = {}
    for ask in ASKS:
        done = lab.run("sbatch", "--parsable", "--hold", *ask, "--wrap", "true")
        ids[done.stdout.strip()] = ask
    with mock.patch.dict(os.environ, lab.env):  # the edge of the world: which slurmctld
        pending = {job.job_id: job for job in SlurmCli(Path("/usr/bin")).pending_jobs()}
    gpu2 = template(
        "gpu2", partition="cloud", gpus=2, cpus=4, memory_mb=4000, max_nodes=6, gpu_model="a100"
    )
    for job_id, ask in ids.items():
        job = pending[job_id]
        nodes, gpus = ASKS[ask]
        assert why_not(job, gpu2) is None, (ask, why_not(job, gpu2))
        assert (nodes_on(job, gpu2), job.gpus_total) == (nodes, gpus), ask

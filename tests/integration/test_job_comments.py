"""A real slurmctld takes cm-scale's verdicts as job comments as squeue then shows them
(issue 26 item 5): the text whole (no quoting to undo), a pending array by its array id,
a batch with a job that ended since the snapshot still updates the others, and a comment
read back equals the one written, so an unchanged verdict costs no call."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from clustermgr.core.errors import WorkloadError
from clustermgr.workload.slurm import SlurmCli
from tests.conftest import cannot_run
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

pytestmark = pytest.mark.integration


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    if os.geteuid() != 0:
        cannot_run("needs root to run slurmctld")
    groups = [NodeGroup("c[1-2]", cpus=2, memory_mb=1000)]
    with SlurmLab(tmp_path / "slurm", groups, [Partition("cloud", "c[1-2]", default=True)]) as lab:
        yield lab


def test_comments_reach_squeue_as_written(lab: SlurmLab) -> None:
    def sbatch(*args: str) -> str:
        return lab.run("sbatch", "--parsable", "--hold", *args, "--wrap", "true").stdout.strip()

    single, array, mine = sbatch(), sbatch("--array=1-50"), sbatch("--comment=my note")
    with mock.patch.dict(os.environ, lab.env):  # the edge of the world: which slurmctld
        slurm = SlurmCli(Path("/usr/bin"))
        record = f"{array}_[1-50]"
        text = "clustermgr: (Code:PROTECTED) 1 failure; until 14:05 UTC\nor `reset`"
        slurm.comment_jobs([single, record], text)
        read = {job.job_id: job for job in slurm.pending_jobs()}
        written = "clustermgr: (Code:PROTECTED) 1 failure; until 14:05 UTC or `reset`"
        assert read[single].comment == read[record].comment == written
        assert read[record].array_tasks == 50 and read[mine].comment == "my note"
        with pytest.raises(WorkloadError, match="Invalid job id"):
            slurm.comment_jobs(["999999", single], "")  # one ended: the other still cleared
        assert {job.job_id: job.comment for job in slurm.pending_jobs()}[single] == ""
        with pytest.raises(WorkloadError, match="not a job id"):
            slurm.comment_jobs(["1 comment=x"], "clustermgr: y")

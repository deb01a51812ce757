"""A job's GPUs read as Slurm reads them: per node (--gres, --gpus-per-node), for the
whole job (--gpus) or per task (--gpus-per-task). The squeue lines are what a real
slurmctld 22.05 printed for each (tests/e2e/test_odd_queue.py submits them for real)."""

from __future__ import annotations

import pytest

from clustermgr.config import PolicyRef
from clustermgr.policy.fit import nodes_on, why_not
from clustermgr.workload.squeue import PENDING_FIELDS, parse_pending
from tests.unit.test_policies import SLOTS, job, run, template, view

GPU2 = template("gpu2", gpus=2, max_nodes=6)


def squeue_line(nodes: str, tasks: str, per_node: str, per_job: str, per_task: str) -> str:
    values = {
        "JobArrayID": "7",
        "ArrayTaskID": "N/A",
        "Partition": "cloud",
        "NumNodes": nodes,
        "NumTasks": tasks,
        "tres-alloc": f"cpu={tasks},mem=4000M,node={nodes},billing=1",
        "tres-per-node": per_node,
        "tres-per-job": per_job,
        "tres-per-task": per_task,
        "Feature": "(null)",
        "TimeLimit": "UNLIMITED",
        "SubmitTime": "2026-11-25T19:08:18",
        "StartTime": "N/A",
        "UserName": "alice",
        "Requeue": "1",
        "Reason": "Resources",
    }
    return "\t".join(values[name] for name in PENDING_FIELDS)


@pytest.mark.parametrize(
    ("sbatch", "line", "nodes", "gpus"),
    [
        ("--gpus=3", squeue_line("1", "1", "N/A", "gres:gpu:3", "N/A"), 2, 3),
        ("-N 2 --gpus=3", squeue_line("2", "2", "N/A", "gres:gpu:3", "N/A"), 2, 3),
        ("--gpus=a100:4", squeue_line("1", "1", "N/A", "gres:gpu:a100:4", "N/A"), 2, 4),
        ("-N 2 --gpus-per-node=2", squeue_line("2", "2", "gres:gpu:2", "N/A", "N/A"), 2, 4),
        ("--gres=gpu:a100:2", squeue_line("1", "1", "gres:gpu:a100:2", "N/A", "N/A"), 1, 2),
        ("-n 3 --gpus-per-task=1", squeue_line("1", "3", "N/A", "N/A", "gres:gpu:1"), 2, 3),
        ("-n 5 --gpus-per-task=2", squeue_line("1", "5", "N/A", "N/A", "gres:gpu:2"), 5, 10),
    ],
)
def test_each_way_of_asking_for_gpus_gets_the_nodes_slurm_would_give(
    sbatch: str, line: str, nodes: int, gpus: int
) -> None:
    (pending,) = parse_pending(line)
    gpu2 = template("gpu2", gpus=2, max_nodes=6, cpus=8, memory_mb=8000, gpu_model="a100")
    assert why_not(pending, gpu2) is None, sbatch
    assert nodes_on(pending, gpu2) == nodes, sbatch
    assert pending.gpus_total == gpus, sbatch


def test_what_no_number_of_nodes_can_give_is_unfit_with_the_reason() -> None:
    assert why_not(job("1", gpus_per_node=3), GPU2) == "needs 3 GPUs per node, gpu2 has 2"
    assert why_not(job("2", gpus_per_node=0, gpus_per_task=3, tasks=2, cpus_per_node=1), GPU2) == (
        "needs 3 GPUs per task, gpu2 has 2"
    )
    wide = job("3", gpus_per_node=0, gpus_per_job=14, cpus_per_node=1)
    assert why_not(wide, GPU2) == (
        "needs 7 nodes (14 GPUs over 2-GPU nodes), gpu2 allows at most 6"
    )
    cpu_only = template("cpu", gpus=0)
    assert why_not(job("4", gpus_per_node=0, gpus_per_job=1), cpu_only) == (
        "needs 1 GPUs, cpu has none"
    )


def test_queue_depth_launches_two_2gpu_nodes_for_a_3gpu_job() -> None:
    v = view(
        [s for s in SLOTS],
        [job("1", gpus_per_node=0, gpus_per_job=3, cpus_per_node=1)],
        templates={"gpu": template(gpus=2, max_nodes=6)},
    )
    decision = run([PolicyRef(name="queue_depth")], v)
    assert [(launch.template, launch.count) for launch in decision.launches] == [("gpu", 2)]
    assert not decision.unfit

"""Decision work of one cycle, after Slurm's answer is in memory: build the view from the
database (10,000 nodes), run the policy chain over 100,000 distinct pending job records,
clamp, and write a plan of 1,000 transitions. Budget: under 1 s. Prints each step.
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from clustermgr.config import parse_settings
from clustermgr.db.engine import Database
from clustermgr.inventory import sync_nodes
from clustermgr.policy.chain import PolicyRunner
from clustermgr.policy.loader import load_chain
from clustermgr.scaling.act import Actor
from clustermgr.scaling.clamp import clamp
from clustermgr.scaling.observe import build_view
from clustermgr.workload.base import PendingJob, WorkloadNode, WorkloadSnapshot
from clustermgr.workload.slurm import SlurmCli

NODES = 10_000
JOBS = 100_000


def settings_dict() -> dict[str, object]:
    return {
        "cluster": {"name": "bench"},
        "providers": [{"name": "aws1", "type": "aws", "region": "us-east-1"}],
        "templates": [
            {
                "name": f"t{i}",
                "provider": "aws1",
                "partition": "cloud",
                "nodes": f"t{i}-[0001-1000]",
                "instance_types": ["p4d.24xlarge"],
                "image": "ami-1",
                "cpus": 96,
                "memory_mb": 1_000_000,
                "gpu_model": "a100",
                "gpus": 8,
                "prices": {"p4d.24xlarge": {"on_demand": 32.0}},
            }
            for i in range(NODES // 1000)
        ],
        "policy": {
            "chain": [
                {"name": "onprem_first"},
                {"name": "queue_depth"},
                {"name": "budget_cap", "options": {"hourly": 32_000}},
                {"name": "idle_timeout"},
            ],
            "timeout_s": 30,
        },
    }


def main() -> None:
    now = datetime.now(UTC)
    settings = parse_settings(settings_dict())
    with tempfile.TemporaryDirectory() as tmp:
        database = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
        database.upgrade()
        with database.session() as session:
            sync_nodes(session, settings, None)
        slurm_nodes = {
            name: WorkloadNode(
                name,
                "IDLE",
                frozenset({"CLOUD", "POWERED_DOWN"}),
                cpus=96,
                memory_mb=1_000_000,
                gpus=8,
                gpu_model="a100",
                partitions=("cloud",),
            )
            for t in settings.templates
            for name in t.node_names
        }
        pending = [
            PendingJob(
                job_id=str(i),
                partition="cloud",
                nodes=1,
                tasks=1,
                cpus_per_node=96,
                memory_per_node_mb=1000,
                gpus_per_node=8,
                gpu_model=None,
                gpus_per_job=0,
                features=(),
                time_limit_min=60,
                submit_time=now - timedelta(minutes=5),
                reason="Resources",
                estimated_start=None,
            )
            for i in range(JOBS)
        ]
        snapshot = WorkloadSnapshot(taken_at=now, nodes=slurm_nodes, pending=pending)
        runner = PolicyRunner(load_chain(list(settings.policy.chain)), 30)
        steps = {}
        start = time.perf_counter()
        with database.session() as session:
            view = build_view(session, settings, snapshot, {}, now)
        steps["view (10,000 nodes from the database)"] = time.perf_counter() - start
        mark = time.perf_counter()
        result = runner.run(view)
        steps["policy chain (100,000 pending jobs)"] = time.perf_counter() - mark
        mark = time.perf_counter()
        plan = clamp(result.decision, view, settings)
        steps["clamp"] = time.perf_counter() - mark
        plan.launches = plan.launches[:1]  # write exactly 1,000 transitions
        orders = plan.launches
        mark = time.perf_counter()
        actor = Actor(settings, database, SlurmCli(), {}, lambda: now)
        for order in orders:
            actor.begin_launch(order)
        steps["write transitions"] = time.perf_counter() - mark
        total = time.perf_counter() - start
        written = sum(len(o.nodes) for o in orders)
    for name, seconds in steps.items():
        print(f"{name:<40} {seconds:.3f} s")
    print(f"{'total decision work':<40} {total:.3f} s  ({written} transitions; budget 1 s)")


if __name__ == "__main__":
    main()

"""Decision work of one cycle, after Slurm's answer is in memory: build the view from the
database (10,000 nodes), run the policy chain over 100,000 distinct pending job records,
clamp, and write a plan of 1,000 transitions. Budget: under 1 s. Prints each step.
`--quick`: 200 nodes and 1,000 jobs (the smoke test); no figure is asserted.
`--baseline REF`: also the code of git REF (`git archive` into a temporary directory, its
own bench script), alternated with this tree `--runs` times each, each run a process of its
own; prints both medians and the ratio after / before (the budget's measure: no slower).
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import REPO, fail, parser

from clustermgr.config import parse_settings
from clustermgr.db.database import Database
from clustermgr.nodes.inventory import sync_nodes
from clustermgr.policy.chain import PolicyRunner
from clustermgr.policy.loader import load_chain
from clustermgr.scaling.accounting import account_jobs
from clustermgr.scaling.actor import Actor
from clustermgr.scaling.clamp import clamp
from clustermgr.scaling.decide import initial_decision
from clustermgr.scaling.engine import snapshot_frozen
from clustermgr.scaling.observe import Snapshot, read_nodes
from clustermgr.scaling.projection import build_view
from clustermgr.scaling.reconcile import reconcile
from clustermgr.scaling.specs import LaunchSpecs
from clustermgr.workload.base import PendingJob, WorkloadNode, WorkloadSnapshot
from clustermgr.workload.slurm import SlurmCli

PER_TEMPLATE = 1000


def settings_dict(nodes: int) -> dict[str, object]:
    per_template = min(nodes, PER_TEMPLATE)
    return {
        "cluster": {"name": "bench"},
        "providers": [{"name": "aws1", "type": "aws", "region": "us-east-1"}],
        "templates": [
            {
                "name": f"t{i}",
                "provider": "aws1",
                "partition": "cloud",
                "nodes": f"t{i}-[0001-{per_template:04d}]",
                "instance_types": ["p4d.24xlarge"],
                "image": "ami-1",
                "cpus": 96,
                "memory_mb": 1_000_000,
                "gpu_model": "a100",
                "gpus": 8,
                "prices": {"p4d.24xlarge": {"on_demand": 32.0}},
            }
            for i in range(nodes // per_template)
        ],
        "policy": {
            "chain": [
                {"name": "onprem_first"},
                {"name": "queue_depth"},
                {"name": "budget_cap", "options": {"hourly": 32 * per_template}},
                {"name": "idle_timeout"},
            ],
            "timeout_s": 30,
        },
    }


TOTAL = re.compile(r"^total decision work\s+([0-9.]+) s", re.M)


def total_of(script: Path, quick: bool) -> float:
    """One run of a bench script in a process of its own: its total decision work."""
    argv = [sys.executable, str(script), *(["--quick"] if quick else [])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    found = TOTAL.search(done.stdout)
    if done.returncode != 0 or found is None:
        fail(f"{script} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return float(found.group(1)) if found else 0.0


def compare(ref: str, runs: int, quick: bool) -> None:
    """Before (git `ref`) and after (this tree), alternated; medians and their ratio."""
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "archive",
            "--format=tar",
            ref,
            "--",
            "bench",
            "clustermgr",
            "policies",
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    if archive.returncode != 0:
        fail(f"git archive {ref}: {archive.stderr.decode().strip()[-300:]}")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, timeout=120, check=True)
        sides = {"before": Path(tmp) / "bench" / "bench_engine.py", "after": Path(__file__)}
        totals: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(runs):
            for side, script in sides.items():
                totals[side].append(total_of(script, quick))
    for side, values in totals.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"{side:<7} median {statistics.median(values):.3f} s  ({shown})")
    ratio = statistics.median(totals["after"]) / statistics.median(totals["before"])
    print(f"ratio after / before ({ref}): {ratio:.2f}")


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--baseline", metavar="REF", help="compare with git REF, alternated")
    cli.add_argument("--runs", type=int, default=5, help="runs of each side (--baseline)")
    args = cli.parse_args()
    if args.baseline:
        compare(args.baseline, max(1, args.runs), args.quick)
        return
    nodes, jobs = (200, 1000) if args.quick else (10_000, 100_000)
    now = datetime.now(UTC)
    settings = parse_settings(settings_dict(nodes))
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
            for i in range(jobs)
        ]
        snapshot = WorkloadSnapshot(taken_at=now, nodes=slurm_nodes, pending=pending)
        runner = PolicyRunner(load_chain(list(settings.policy.chain)), 30)
        steps = {}
        start = time.perf_counter()
        with database.session() as session:
            seen = Snapshot(
                now=now, workload=snapshot, nodes=read_nodes(session).records, instances={}
            )
        steps[f"snapshot ({nodes:,} nodes from the database)"] = time.perf_counter() - start
        with snapshot_frozen():  # as Engine.cycle does after observing
            mark = time.perf_counter()
            judgment = reconcile(settings, seen, 600)
            steps["reconcile (verdicts)"] = time.perf_counter() - mark
            mark = time.perf_counter()
            view = build_view(settings, seen, judgment)
            view = view.with_proposed(initial_decision(view))
            steps["view"] = time.perf_counter() - mark
            mark = time.perf_counter()
            result = runner.run(view)
            steps[f"policy chain ({jobs:,} pending jobs)"] = time.perf_counter() - mark
            mark = time.perf_counter()
            plan = clamp(result.decision, view, settings)
            steps["clamp"] = time.perf_counter() - mark
            mark = time.perf_counter()
            plan.jobs = account_jobs(view, result.decision, plan)
            steps["account for every pending job"] = time.perf_counter() - mark
            plan.launches = plan.launches[:1]  # one template: 1,000 transitions (quick: 200)
            orders = plan.launches
            mark = time.perf_counter()
            specs = LaunchSpecs(settings, lambda: now)
            actor = Actor(view.templates, database, SlurmCli(), {}, lambda: now, specs)
            for order in orders:
                actor.begin_launch(order)
            steps["write transitions"] = time.perf_counter() - mark
        total = time.perf_counter() - start
        written = sum(len(o.nodes) for o in orders)
    if not written:
        fail("the policy chain launched nothing for a full queue")
    for name, seconds in steps.items():
        print(f"{name:<40} {seconds:.3f} s")
    budget = "budget 1 s at 10,000 nodes"
    print(f"{'total decision work':<40} {total:.3f} s  ({written} transitions; {budget})")


if __name__ == "__main__":
    main()

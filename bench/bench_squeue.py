"""Reading the queue from a real slurmctld: the adapter's read-and-parse against the same
squeue command with its output sent to /dev/null (budget: at most 1.5x).

Measured for 100 held arrays of 1,000 tasks (100,000 tasks, counted without expanding
them) and for 10,000 individual held jobs. Needs root (it starts its own slurmctld).
Prints both times and the ratio; not a pass/fail test. `--quick` (the smoke test): 2 arrays
of 10 tasks and 20 jobs, 2 runs each; exits 1 only when the adapter misreads the queue.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import fail, parser  # also puts the repository (tests.labs) on sys.path

from clustermgr.workload.slurm import SlurmCli
from clustermgr.workload.squeue import PENDING_FORMAT
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab


def bare(env: dict[str, str]) -> float:
    argv = ["/usr/bin/squeue", "--noheader", "--states=PENDING", f"--Format={PENDING_FORMAT}"]
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, env=env, check=True, timeout=120)
    return time.perf_counter() - start


def adapter(slurm: SlurmCli) -> tuple[float, int]:
    start = time.perf_counter()
    jobs = slurm.pending_jobs()
    return time.perf_counter() - start, sum(j.array_tasks for j in jobs)


def measure(label: str, lab: SlurmLab, runs: int, expected: int) -> None:
    env = {**os.environ, **lab.env}
    os.environ.update(lab.env)
    slurm = SlurmCli()
    command = statistics.median(bare(env) for _ in range(runs))
    results = [adapter(slurm) for _ in range(runs)]
    ours = statistics.median(r[0] for r in results)
    print(
        f"{label:<42} squeue {command * 1000:7.1f} ms  adapter {ours * 1000:7.1f} ms  "
        f"ratio {ours / command:.2f}  ({results[0][1]} tasks)"
    )
    if any(tasks != expected for _, tasks in results):
        fail(f"{label}: the adapter counted {results[0][1]} pending tasks, not {expected}")


def submit(lab: SlurmLab, args: list[str], count: int) -> None:
    env = {**os.environ, **lab.env}

    def one(_: int) -> None:
        subprocess.run(
            ["/usr/bin/sbatch", "-H", "-p", "cloud", *args, "--wrap", "hostname"],
            stdout=subprocess.DEVNULL,
            env=env,
            check=True,
            timeout=60,
        )

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(count)))


def main() -> None:
    args = parser(__doc__).parse_args()
    if os.geteuid() != 0:
        print("bench_squeue: needs root (it starts its own slurmctld)", file=sys.stderr)
        raise SystemExit(2)
    arrays, tasks, singles, runs = (2, 10, 20, 2) if args.quick else (100, 1000, 10_000, 7)
    with tempfile.TemporaryDirectory() as tmp:
        lab = SlurmLab(
            Path(tmp),
            [NodeGroup("cloud[1-4]")],
            [Partition("cloud", "cloud[1-4]")],
            extra_conf=["MaxJobCount=200000", "MaxArraySize=1001"],
        )
        with lab:
            submit(lab, [f"--array=1-{tasks}"], arrays)
            measure(f"{arrays:,} held arrays x {tasks:,} tasks", lab, runs, arrays * tasks)
            lab.run("scancel", "--state=PENDING", "-u", "root")
            submit(lab, [], singles)
            measure(f"{singles:,} individual held jobs", lab, runs, singles)


if __name__ == "__main__":
    main()

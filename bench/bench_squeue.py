"""Reading the queue from a real slurmctld: the adapter's read-and-parse against the same
squeue command with its output sent to /dev/null (budget: at most 1.5x).

Measured for 100 held arrays of 1,000 tasks (100,000 tasks, counted without expanding
them) and for 10,000 individual held jobs. Needs root (it starts its own slurmctld).
Prints both times and the ratio; not a pass/fail test.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from clustermgr.testing.slurmlab import NodeGroup, Partition, SlurmLab
from clustermgr.workload.slurm import SlurmCli
from clustermgr.workload.squeue import PENDING_FORMAT

RUNS = 7


def bare(env: dict[str, str]) -> float:
    argv = ["/usr/bin/squeue", "--noheader", "--states=PENDING", f"--Format={PENDING_FORMAT}"]
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, env=env, check=True, timeout=120)
    return time.perf_counter() - start


def adapter(slurm: SlurmCli) -> tuple[float, int]:
    start = time.perf_counter()
    jobs = slurm.pending_jobs()
    return time.perf_counter() - start, sum(j.array_tasks for j in jobs)


def measure(label: str, lab: SlurmLab) -> None:
    env = {**os.environ, **lab.env}
    os.environ.update(lab.env)
    slurm = SlurmCli()
    command = statistics.median(bare(env) for _ in range(RUNS))
    results = [adapter(slurm) for _ in range(RUNS)]
    ours = statistics.median(r[0] for r in results)
    print(
        f"{label:<42} squeue {command * 1000:7.1f} ms  adapter {ours * 1000:7.1f} ms  "
        f"ratio {ours / command:.2f}  ({results[0][1]} tasks)"
    )


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
    with tempfile.TemporaryDirectory() as tmp:
        lab = SlurmLab(
            Path(tmp),
            [NodeGroup("cloud[1-4]")],
            [Partition("cloud", "cloud[1-4]")],
            extra_conf=["MaxJobCount=200000", "MaxArraySize=1001"],
        )
        with lab:
            submit(lab, ["--array=1-1000"], 100)
            measure("100 held arrays x 1,000 tasks", lab)
            lab.run("scancel", "--state=PENDING", "-u", "root")
            submit(lab, [], 10_000)
            measure("10,000 individual held jobs", lab)


if __name__ == "__main__":
    main()

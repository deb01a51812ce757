"""Foundation budgets: `clustermgr --version` < 0.3 s; `nodes list --json`, 10,000 nodes < 1 s.

Prints figures (medians); not a pass/fail test. Run: .venv/bin/python bench/bench_cli.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = """
[cluster]
name = "bench"
[[providers]]
name = "aws1"
type = "aws"
region = "us-east-1"
[[templates]]
name = "big"
provider = "aws1"
partition = "cloud"
nodes = "gpu-[00001-10000]"
instance_types = ["p4d.24xlarge"]
image = "ami-1"
cpus = 96
memory_mb = 1000
gpu_model = "a100"
gpus = 8
"""


def wall(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, timeout=120)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    cm = str(Path(sys.executable).with_name("clustermgr"))
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.toml"
        config.write_text(CONFIG)
        env = {
            **os.environ,
            "CLUSTERMGR_CONFIG": str(config),
            "CLUSTERMGR_DB": f"sqlite:///{tmp}/bench.db",
        }
        version = wall([cm, "--version"], env, 10)
        python = wall([sys.executable, "-c", "pass"], env, 10)
        subprocess.run([cm, "db", "upgrade"], env=env, check=True, stdout=subprocess.DEVNULL)
        start = time.perf_counter()
        subprocess.run([cm, "nodes", "sync", "--no-slurm"], env=env, check=True, timeout=600)
        sync_s = time.perf_counter() - start
        listing = wall([cm, "nodes", "list", "--json"], env, 5)
    print(
        f"clustermgr --version            median {statistics.median(version):.3f} s "
        f"(bare python -c pass {statistics.median(python):.3f} s)  budget 0.3 s"
    )
    print(f"nodes sync, 10,000 new slots    {sync_s:.2f} s")
    print(f"nodes list --json, 10,000 nodes median {statistics.median(listing):.3f} s  budget 1 s")


if __name__ == "__main__":
    main()

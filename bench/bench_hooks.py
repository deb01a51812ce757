"""Resume hook budget: median < 150 ms from start to request recorded.

Runs `clustermgr-slurm-resume` as Slurm would (a fresh process each time) and prints its
median wall time next to `python -c "import boto3"` for scale. Not a pass/fail test.
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
[daemon]
state_dir = "{state}"
[[providers]]
name = "aws1"
type = "aws"
region = "us-east-1"
[[templates]]
name = "t1"
provider = "aws1"
partition = "cloud"
nodes = "gpu-[0001-1000]"
instance_types = ["p4d.24xlarge"]
image = "ami-1"
cpus = 96
memory_mb = 1000
"""


def median_wall(argv: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, timeout=60)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        (state / "spool").mkdir(parents=True)
        config = Path(tmp) / "c.toml"
        config.write_text(CONFIG.format(state=state))
        env = {**os.environ, "CLUSTERMGR_CONFIG": str(config)}
        hook = str(Path(sys.executable).with_name("clustermgr-slurm-resume"))
        resume = median_wall([hook, "gpu-[0001-0008]"], env, 20)
        recorded = len(list((state / "spool").iterdir()))
    boto3 = median_wall([sys.executable, "-c", "import boto3"], env, 5)
    print(
        f"resume hook, median of 20 runs: {resume * 1000:.0f} ms ({recorded} requests recorded)"
        f"  budget 150 ms"
    )
    print(f'python -c "import boto3", median of 5: {boto3 * 1000:.0f} ms')


if __name__ == "__main__":
    main()

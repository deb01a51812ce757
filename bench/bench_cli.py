"""Foundation budgets: `clustermgr --version` < 0.3 s; `nodes list --json`, 10,000 nodes < 1 s.

`nodes list` is timed with the database URL in the config file (the usual installation)
and in $CLUSTERMGR_DB. Prints medians next to a bare `python -c pass` from the same
interpreter; not a pass/fail test (exits 1 only when a command fails or lists the wrong
nodes). Run: .venv/bin/python bench/bench_cli.py [--quick]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import fail, parser, wall

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
nodes = "gpu-[00001-{last:05d}]"
instance_types = ["p4d.24xlarge"]
image = "ami-1"
cpus = 96
memory_mb = 1000
gpu_model = "a100"
gpus = 8
[database]
url = "{url}"
"""


def main() -> None:
    args = parser(__doc__).parse_args()
    nodes, runs = (200, 2) if args.quick else (10_000, 5)
    cm = str(Path(sys.executable).with_name("clustermgr"))
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.toml"
        url = f"sqlite:///{tmp}/bench.db"
        config.write_text(CONFIG.format(last=nodes, url=url))
        env = {**os.environ, "CLUSTERMGR_CONFIG": str(config)}
        env.pop("CLUSTERMGR_DB", None)
        env_url = {**env, "CLUSTERMGR_DB": url}
        version = [wall([cm, "--version"], env) for _ in range(runs * 2)]
        python = [wall([sys.executable, "-c", "pass"], env) for _ in range(runs * 2)]
        wall([cm, "db", "upgrade"], env)
        sync_s = wall([cm, "nodes", "sync", "--no-slurm"], env)
        listing, listing_env = [], []
        for _ in range(runs):
            listing.append(wall([cm, "nodes", "list", "--json"], env))
            listing_env.append(wall([cm, "nodes", "list", "--json"], env_url))
        listed = subprocess.run(
            [cm, "nodes", "list", "--json"], env=env, capture_output=True, check=False
        )
    if listed.returncode != 0 or len(json.loads(listed.stdout)) != nodes:
        fail(f"nodes list --json did not list {nodes} nodes: {listed.stderr.decode()[-300:]}")
    python_s = statistics.median(python)
    print(
        f"clustermgr --version            median {statistics.median(version):.3f} s "
        f"(bare python -c pass {python_s:.3f} s)  budget 0.3 s"
    )
    print(f"nodes sync, {nodes:,} new slots    {sync_s:.2f} s")
    for how, times in (("URL in config", listing), ("CLUSTERMGR_DB", listing_env)):
        list_s = statistics.median(times)
        print(
            f"nodes list --json, {nodes:,} nodes ({how}) median {list_s:.3f} s "
            f"({list_s / python_s:.1f}x python -c pass)  budget 1 s at 10,000"
        )


if __name__ == "__main__":
    main()

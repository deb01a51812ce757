"""Resume hook budget: at most 2x a bare `python -c pass`, both measured in the same run.

Runs `clustermgr-slurm-resume` as Slurm would (a fresh process each time; a live cm-scale
heartbeat and socket, so the request is recorded and poked, not powered down) alternately with
`python -c pass` from the same interpreter, and prints both medians and the ratio, then
`python -c "import boto3"` for scale. Not a pass/fail test; exits 1 only when the hook
itself fails or records nothing.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from _common import fail, median_wall, parser, wall

from clustermgr.runtime.statedir import write_heartbeat

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
BUDGET_RATIO = 2.0


def main() -> None:
    args = parser(__doc__).parse_args()
    runs = 3 if args.quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        (state / "spool").mkdir(parents=True)
        # what cm-scale writes every few seconds; without it the hook powers the nodes down
        beat = {"pid": os.getpid(), "host": socket.gethostname(), "role": "leader"}
        write_heartbeat(state, {**beat, "at": datetime.now(UTC).isoformat()})
        daemon = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # the hook pokes it
        daemon.bind(str(state / "cm-scale.sock"))
        config = Path(tmp) / "c.toml"
        config.write_text(CONFIG.format(state=state))
        env = {**os.environ, "CLUSTERMGR_CONFIG": str(config)}
        hook = [str(Path(sys.executable).with_name("clustermgr-slurm-resume")), "gpu-[0001-0008]"]
        bare = [sys.executable, "-c", "pass"]
        wall(hook, env)  # warm the page cache and the .pyc files
        hook_s, bare_s = [], []
        for _ in range(runs):  # alternated, so that load elsewhere hits both alike
            bare_s.append(wall(bare, env))
            hook_s.append(wall(hook, env))
        recorded = len([p for p in (state / "spool").iterdir() if p.suffix == ".json"])
        daemon.close()
    if recorded != runs + 1:
        fail(f"the resume hook recorded {recorded} requests in {runs + 1} runs")
    resume, python = statistics.median(hook_s), statistics.median(bare_s)
    print(f"resume hook, median of {runs}:      {resume * 1000:5.0f} ms ({recorded} requests)")
    print(f"python -c pass, median of {runs}:   {python * 1000:5.0f} ms (same interpreter)")
    print(f"ratio {resume / python:.2f}  budget <= {BUDGET_RATIO}")
    if not args.quick:
        boto3 = median_wall([sys.executable, "-c", "import boto3"], env, 5)
        print(f'python -c "import boto3", median of 5: {boto3 * 1000:.0f} ms (for scale)')


if __name__ == "__main__":
    main()

"""`bench/bench_burst.py --quick` in `make test` (issue 24 item 4): a real slurmctld with 200
cloud nodes, the AWS fake and cm-scale as the daemon burst for 4 jobs of 50 nodes, and every
node ends launched, bound and known to Slurm. The bench's figures (times, CPU, calls) are
printed, never asserted. It runs here, in the cloud-networks group (tests/conftest.py), not
in test_bench_smoke.py: its lab hangs on the AWS fake's fixed network (172.31.0.0/16)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import cannot_run, run_bench_quick
from tests.e2e.conftest import _can_burst


def test_a_quick_burst_ends_with_every_node_known_to_slurm(tmp_path: Path) -> None:
    missing = _can_burst()
    if missing:
        cannot_run(f"the burst bench cannot run: {missing}")
    done = run_bench_quick("bench_burst.py", tmp_path, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "burst of 200 nodes in 4 jobs of 50" in done.stdout, out
    assert done.stdout.strip().endswith("all 200 nodes launched, bound and known to Slurm"), out

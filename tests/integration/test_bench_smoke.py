"""Every bench in bench/ runs in its `--quick` mode (tiny sizes, seconds) and exits 0, so a
bench that rots fails `make test`. Figures are printed by the benches, never asserted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO, cannot_run, run_bench_quick

# every runnable script of bench/, not its helpers, nor those whose labs are on the AWS
# fake's network (172.31.0.0/16): their quick runs are tests of the cloud-networks group
# (tests/conftest.py), as two labs on that network at once break each other
# (tests/labs/cloudlab.py, claim_network): bench_burst.py in tests/e2e/test_burst_bench.py,
# chaos_campaign.py (its --quick is an aws lab) in tests/chaos/test_campaign.py
OWN_TEST = {"bench_burst.py", "chaos_campaign.py"}
BENCHES = sorted(
    p
    for p in (REPO / "bench").glob("*.py")
    if not p.name.startswith("_") and p.name not in OWN_TEST
)
# their own slurmctld, PostgreSQL, network namespaces
NEEDS_ROOT = {"bench_squeue.py", "bench_takeover.py"}


def test_every_bench_is_found() -> None:
    assert len(BENCHES) >= 5, BENCHES


@pytest.mark.parametrize("bench", BENCHES, ids=lambda path: path.stem)
def test_bench_quick_mode_runs(bench: Path, tmp_path: Path) -> None:
    if bench.name in NEEDS_ROOT and os.geteuid() != 0:
        cannot_run(f"{bench.name} needs root")
    # from a directory of its own: benches must not depend on the caller's directory
    done = run_bench_quick(bench.name, tmp_path, timeout=120)
    assert done.returncode == 0, f"{bench.name} --quick failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{bench.name} --quick printed no figures"

"""Every bench in bench/ runs in its `--quick` mode (tiny sizes, seconds) and exits 0, so a
bench that rots fails `make test`. Figures are printed by the benches, never asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, cannot_run

# every runnable script of bench/ (the crash campaign's runner too), not its helpers, nor
# bench_burst.py: its lab shares the cloud fakes' network, so its quick run is an e2e test of
# the cloud-networks group (tests/e2e/test_burst_bench.py)
OWN_TEST = {"bench_burst.py"}
BENCHES = sorted(
    p
    for p in (REPO / "bench").glob("*.py")
    if not p.name.startswith("_") and p.name not in OWN_TEST
)
# their own slurmctld, PostgreSQL, network namespaces
NEEDS_ROOT = {"bench_squeue.py", "bench_takeover.py", "chaos_campaign.py"}


def test_every_bench_is_found() -> None:
    assert len(BENCHES) >= 5, BENCHES


@pytest.mark.parametrize("bench", BENCHES, ids=lambda path: path.stem)
def test_bench_quick_mode_runs(bench: Path, tmp_path: Path) -> None:
    if bench.name in NEEDS_ROOT and os.geteuid() != 0:
        cannot_run(f"{bench.name} needs root")
    done = subprocess.run(
        [sys.executable, str(bench), "--quick"],
        cwd=tmp_path,  # benches must not depend on the caller's directory
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{bench.name} --quick failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{bench.name} --quick printed no figures"

"""A burst node whose boot health check fails (a fake nvidia-smi shows 1 of its 2 GPUs the
first time) is powered down, terminated and replaced; its job completes on the
replacement. The health check is the real `clustermgr-health-check`, run by slurmd as its
HealthCheckProgram inside the node's network namespace."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.testing.burstlab import BurstLab, BurstLabSpec

FAKE_SMI = """#!/bin/sh
# One GPU short on the very first query of this test, healthy afterwards.
if [ ! -e '{mark}' ]; then
  : > '{mark}'
  echo "NVIDIA fake GPU, 0, No, No"
  exit 0
fi
echo "NVIDIA fake GPU, 0, No, No"
echo "NVIDIA fake GPU, 0, No, No"
"""


@pytest.fixture
def lab(lab_dir: Path) -> Iterator[BurstLab]:
    fake_bin = lab_dir / "fakebin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(mark=lab_dir / "first-boot-seen"))
    smi.chmod(0o755)
    wrapper = lab_dir / "health-check"
    check = Path(sys.executable).with_name("clustermgr-health-check")
    wrapper.write_text(
        "#!/bin/sh\n"
        f"PATH='{fake_bin}':/usr/bin:/bin SLURM_CONF='{lab_dir / 'slurm' / 'slurm.conf'}' "
        f"exec '{check}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    spec = BurstLabSpec(demand_mode="slurm", subnet="10.213.13.0/24", health_check=str(wrapper))
    made = BurstLab(lab_dir, spec)
    try:
        yield made.start()
    finally:
        made.stop()


def test_failed_boot_check_replaces_the_node_and_the_job_completes(lab: BurstLab) -> None:
    job = lab.sbatch("--wrap", "hostname")
    lab.run_until(lambda: lab.job_field(job, "JobState") == "COMPLETED", timeout_s=420, pause_s=3)
    assert lab.job_field(job, "Restarts") == "1"  # requeued off the bad node at once
    events = json.loads(lab.clustermgr("events", "--since", "1h", "--json").stdout)
    failed = [e for e in events if e["new_state"] == "FAILED"]
    assert failed and failed[0]["reason"].startswith("(Code:HEALTH) boot: 1 of 2 GPUs visible")
    bad = failed[0]["node"]
    after = [e for e in events[events.index(failed[0]) + 1 :] if e["node"] == bad]
    assert any(e["new_state"] == "POWERED_DOWN" for e in after)  # terminated, back in the pool
    launches = [e for e in events if e["new_state"] == "BOOTING"]
    assert len(launches) >= 2  # the bad instance and its replacement

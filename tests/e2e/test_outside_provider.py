"""A provider package outside clustermgr/ bursts a job, with no edit to any file of
clustermgr/: tests/fixtures/outside_provider is pip-installed (its own pyproject declares
the `clustermgr.providers` entry point), every command and Slurm hook sees it on
PYTHONPATH, the [[providers]] entry of type `outside` is validated by the package's own
options model, and `cm-scale --once` launches through its provider class (real slurmd in
a namespace, as the local provider runs them) until the job completes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import slurm_user_for_hooks
from tests.labs.burstlab import BurstLab, BurstLabSpec
from tests.labs.outside import install_outside_provider, outside_toml


@pytest.fixture
def outside_lab(lab_dir: Path) -> Iterator[BurstLab]:
    site = install_outside_provider(lab_dir)
    spec = BurstLabSpec(
        slurm_user=slurm_user_for_hooks(),
        gpus=0,
        instance_type="local.cpu",
        extra_env={"PYTHONPATH": str(site)},
    )
    lab = BurstLab(lab_dir, spec)
    # the outside provider keeps its instances where the lab's tear-down looks for them
    lab.spec.provider_toml = outside_toml(spec.subnet, lab.local_state_dir)
    try:
        yield lab.start()
    finally:
        lab.stop()


def test_an_installed_outside_provider_bursts_a_job(outside_lab: BurstLab) -> None:
    lab = outside_lab
    listed = json.loads(lab.clustermgr("providers", "list", "--json").stdout)
    assert [(p["name"], p["type"]) for p in listed] == [("local", "outside")]

    job = lab.sbatch("--wrap", "hostname")
    lab.run_until(lambda: lab.job_field(job, "JobState") == "COMPLETED", timeout_s=120)
    ran_on = lab.job_field(job, "NodeList")
    assert ran_on.startswith("cloud")
    assert [i["node"] for i in lab.instances()] == [ran_on]
    history = json.loads(lab.clustermgr("events", "--since", "1h", "--json").stdout)
    assert any(e["node"] == ran_on and e["new_state"] == "BOOTING" for e in history)

    # its keys are checked by its own options model: one line naming the key
    lab.spec.provider_toml = outside_toml("10.213.7.0/33", lab.local_state_dir)
    lab.write_config()
    done = lab.clustermgr("config", "check", check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"clustermgr: error: {lab.config_path}: providers[0:local].lab_subnet: "
        "Input is not a valid IPv4 network (got '10.213.7.0/33')"
    ]

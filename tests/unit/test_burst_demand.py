"""What `clustermgr status` and the pending gauges call demand: jobs a cloud template fits,
not those of on-prem templates' partitions or of Slurm's own nodes; and a power-up Slurm
refuses is a warning, not an info line (issue 34 item 8)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clustermgr.db.database import Database
from clustermgr.policy.fit import BurstDemand, burst_demand
from clustermgr.scaling.actor import Actor
from clustermgr.scaling.observe import template_views
from clustermgr.scaling.specs import LaunchSpecs
from clustermgr.workload.slurm import SlurmCli
from tests.unit.test_policies import job, template, view
from tests.unit.test_verdicts import SETTINGS

NOW = datetime(2026, 11, 29, 5, 0, tzinfo=UTC)


def test_only_jobs_a_cloud_template_fits_are_burst_demand() -> None:
    cloud = template("gpu", partition="cloud")
    onprem = template("rack", partition="hall", provider="rack1", provider_type="ipmi")
    pending = [
        job("1"),  # cloud, fits: 8 GPUs
        job("2", array_tasks=3),  # an array of 3 such tasks
        job("3", partition="hall"),  # an on-prem template's partition: not burst demand
        job("4", partition="hall,cloud", gpus_per_node=4),  # either: the cloud may serve it
        job("5", partition="batch"),  # Slurm's own nodes
        job("6", gpus_per_node=16),  # fits no cloud template of its partition
    ]
    seen = view([], pending, templates={"gpu": cloud, "rack": onprem})
    assert burst_demand(seen) == BurstDemand(jobs=5, gpus=8 + 3 * 8 + 4)
    only_onprem = replace(seen, templates={"rack": onprem})
    assert burst_demand(only_onprem) == BurstDemand(jobs=0, gpus=0)


def test_a_power_up_slurm_refuses_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"  # the edge of the world: Slurm refusing the update
    scontrol.write_text(
        "#!/bin/sh\necho 'slurm_update error: Invalid node state specified' >&2\nexit 1\n"
    )
    scontrol.chmod(0o755)
    database = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    actor = Actor(
        template_views(SETTINGS),
        database,
        SlurmCli(bin_dir, 10.0),
        {},
        lambda: NOW,
        LaunchSpecs(SETTINGS, lambda: NOW),
    )
    with caplog.at_level(logging.INFO):
        actor.wake(["gpu-1"])
    [record] = [r for r in caplog.records if "power up" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "Slurm refused to power up ['gpu-1']" in record.getMessage()
    assert "Invalid node state specified" in record.getMessage()
    database.dispose()

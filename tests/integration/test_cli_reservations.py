"""`clustermgr catalog --reservations` and `status` show the reservations templates launch
into, as an admin runs them (a real child process) against the AWS SDK over FakeAws, after
launches the provider made into them (issue 24 item 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.providers.registry import make_provider
from clustermgr.providers.reservations import reservation_target
from tests.conftest import run_cli
from tests.fakes.aws_fake import FakeAws
from tests.fakes.aws_harness import IMAGE, aws_env, fake_aws_env
from tests.fakes.aws_reservations import FakeReservation

pytestmark = pytest.mark.integration

RES = "cr-0a1b2c3d4e5f60718"
BLOCK = "cr-0b10c4b10c4b10c4b"
CONFIG = """
[cluster]
name = "restest"
[[providers]]
name = "aws1"
type = "aws"
region = "{region}"
endpoint_url = "{url}"
retry_mode = "standard"
[[templates]]
name = "h100"
provider = "aws1"
partition = "gpu"
nodes = "h100-[1-4]"
instance_types = ["p5.48xlarge"]
zones = ["us-east-1a"]
image = "{image}"
cpus = 192
memory_mb = 1000
capacity_reservation = {{ id = "{res}" }}
reservation_fallback = "none"
[[templates]]
name = "block"
provider = "aws1"
partition = "gpu"
nodes = "blk-[1-2]"
instance_types = ["p5.48xlarge"]
image = "{image}"
cpus = 192
memory_mb = 1000
market = "capacity-block"
capacity_reservation = {{ id = "{block}" }}
"""


@pytest.fixture
def fake() -> Iterator[FakeAws]:
    with FakeAws() as running:
        yield running


def test_catalog_and_status_show_total_in_use_and_free(fake: FakeAws, tmp_path: Path) -> None:
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    fake.add_capacity_reservation(FakeReservation(RES, "p5.48xlarge", "us-east-1a", 4))
    fake.add_capacity_reservation(
        FakeReservation(
            BLOCK,
            "p5.48xlarge",
            "us-east-1a",
            2,
            reservation_type="capacity-block",
            start=starts,
            end=starts + timedelta(days=1),
        )
    )
    config = tmp_path / "c.toml"
    config.write_text(
        CONFIG.format(region=fake.region, url=fake.url, image=IMAGE, res=RES, block=BLOCK)
    )
    env = {
        "CLUSTERMGR_CONFIG": str(config),
        "CLUSTERMGR_DB": f"sqlite:///{tmp_path / 'cm.db'}",
        **fake_aws_env(),
    }
    assert run_cli("db", "upgrade", env=env).returncode == 0
    settings = load_settings(config)
    template = settings.template("h100")
    with aws_env(fake_aws_env()):
        provider = make_provider(settings.provider("aws1"), "restest")
        from clustermgr.providers.base import LaunchSpec

        spec = LaunchSpec(
            template="h100",
            instance_types=tuple(template.instance_types),
            image=IMAGE,
            node_names=tuple(template.node_names),
            zones=tuple(template.zones),
        )
        launched = provider.launch(replace(spec, reservation=reservation_target(template)), 3, "r1")
    assert launched.ok

    done = run_cli("catalog", "--refresh", "--reservations", "--json", env=env)
    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row for row in json.loads(done.stdout)}
    assert set(rows) == {RES, BLOCK}
    res, block = rows[RES], rows[BLOCK]
    assert (res["type"], res["templates"], res["instance_type"]) == (
        "reservation",
        ["h100"],
        "p5.48xlarge",
    )
    assert (res["total"], res["in_use"], res["free"]) == (4, 3, 1)
    assert (block["type"], block["total"], block["in_use"], block["free"]) == (
        "capacity-block",
        2,
        0,
        2,
    )
    assert (
        block["window"]
        == f"{starts:%Y-%m-%d %H:%M} to {starts + timedelta(days=1):%Y-%m-%d %H:%M} UTC"
    )

    # served from the database: the fake forgets nothing, but no cloud is asked
    calls = fake.calls().get("DescribeCapacityReservations", 0)
    cached = run_cli("catalog", "--reservations", "--json", env=env)
    assert json.loads(cached.stdout) == json.loads(done.stdout)
    assert fake.calls().get("DescribeCapacityReservations", 0) == calls

    status = run_cli("status", env=env)
    assert status.returncode == 1, status.stderr  # no daemon leads: monitoring's exit 1
    assert f"reservation {RES} (p5.48xlarge, h100): 3 of 4 in use, 1 free, active" in status.stdout
    assert f"capacity-block {BLOCK} (p5.48xlarge, block): 0 of 2 in use, 2 free" in status.stdout
    as_json = json.loads(run_cli("status", "--json", env=env).stdout)
    assert {(r["id"], r["in_use"], r["free"]) for r in as_json["reservations"]} == {
        (RES, 3, 1),
        (BLOCK, 0, 2),
    }

"""Reserved-capacity template keys (issue 24 item 2): what fits, and one clear line for what
does not (config check exits 2 on these ConfigErrors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.core.errors import ConfigError
from clustermgr.providers.base import ReservationTarget
from clustermgr.providers.reservations import reservation_target

pytestmark = pytest.mark.unit

BASE = """
[cluster]
name = "c1"

[[providers]]
name = "aws1"
type = "aws"
region = "us-east-1"

[[providers]]
name = "az1"
type = "azure"
region = "westeurope"
subscription_id = "00000000-0000-0000-0000-000000000000"
resource_group = "rg1"

[[templates]]
name = "t1"
provider = "{provider}"
partition = "cloud"
nodes = "gpu-[001-004]"
instance_types = ["p5.48xlarge"]
image = "ami-1"
cpus = 96
memory_mb = 1000
{extra}
"""


def load(tmp_path: Path, extra: str, provider: str = "aws1") -> ReservationTarget | None:
    path = tmp_path / "clustermgr.toml"
    path.write_text(BASE.format(provider=provider, extra=extra))
    return reservation_target(load_settings(path).template("t1"))


def test_targeted_reservation_by_id_falls_back_on_demand_by_default(tmp_path: Path) -> None:
    target = load(tmp_path, 'capacity_reservation = { id = "cr-0a1b2c3d4e5f60718" }')
    assert target == ReservationTarget("reservation", "cr-0a1b2c3d4e5f60718", "targeted", True)


def test_resource_group_and_no_fallback(tmp_path: Path) -> None:
    arn = "arn:aws:resource-groups:us-east-1:123456789012:group/h100"
    target = load(
        tmp_path,
        f'capacity_reservation = {{ resource_group = "{arn}" }}\nreservation_fallback = "none"',
    )
    assert target == ReservationTarget("resource-group", arn, "targeted", False)


def test_capacity_block_is_a_market_with_the_block_id(tmp_path: Path) -> None:
    extra = 'market = "capacity-block"\ncapacity_reservation = { id = "cr-0b10c4b10c4b10c4b" }'
    target = load(tmp_path, extra)
    assert target is not None and target.kind == "capacity-block"


def test_azure_group(tmp_path: Path) -> None:
    target = load(tmp_path, 'capacity_reservation_group = "h100-crg"', provider="az1")
    assert target == ReservationTarget("group", "h100-crg", "targeted", True)


@pytest.mark.parametrize(
    ("extra", "provider", "message"),
    [
        (
            'market = "spot"\ncapacity_reservation = { id = "cr-0a1b2c3d4e5f60718" }',
            "aws1",
            "market 'spot' cannot launch into a capacity reservation",
        ),
        (
            'market = "capacity-block"',
            "aws1",
            "market 'capacity-block' needs capacity_reservation.id",
        ),
        (
            'market = "capacity-block"\ncapacity_reservation_group = "g1"',
            "az1",
            "market 'capacity-block' needs capacity_reservation.id",
        ),
        (
            'market = "capacity-block"\ncapacity_reservation = { id = "cr-0b10c4b10c4b10c4b" }',
            "az1",
            "capacity_reservation is not offered by azure provider 'az1' (only aws providers)",
        ),
        (
            'capacity_reservation_group = "g1"',
            "aws1",
            "capacity_reservation_group is not offered by aws provider 'aws1' (only azure",
        ),
        ('reservation_fallback = "none"', "aws1", "reservation_fallback needs"),
        (
            'capacity_reservation = { id = "cr-0a1b2c3d4e5f60718", preference = "open" }\n'
            'reservation_fallback = "none"',
            "aws1",
            "reservation_fallback 'none' needs capacity_reservation.preference 'targeted'",
        ),
        ("capacity_reservation = {}", "aws1", "give exactly one of id"),
        ('capacity_reservation = { id = "r-12" }', "aws1", "capacity_reservation.id"),
        (
            'capacity_reservation = { resource_group = "arn:aws:resource-groups:us-east-1:1:'
            'group/g", preference = "open" }',
            "aws1",
            "preference 'open' cannot name a resource_group",
        ),
    ],
)
def test_combinations_that_make_no_sense_are_one_line(
    tmp_path: Path, extra: str, provider: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, extra, provider)
    text = str(caught.value)
    assert message in text and "\n" not in text

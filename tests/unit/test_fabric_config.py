"""The fabric keys of a template (`efa`, `infiniband`, `vnic_type`): each only on its
cloud's provider and with what it needs beside it, one line and exit 2 otherwise; and the
launch spec carries the fabric the template chose."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.core.errors import ConfigError
from clustermgr.db.models import InstanceTypeRow
from clustermgr.providers.catalog import unfit_fabrics
from tests.conftest import run_cli
from tests.unit.test_config import MINIMAL, write

pytestmark = pytest.mark.unit

AZURE = """
[[providers]]
name = "az1"
type = "azure"
region = "eastus"
subscription_id = "00000000-0000-0000-0000-000000000000"
resource_group = "rg"
"""


def test_efa_on_aws_with_a_placement_group_is_the_launch_fabric(tmp_path: Path) -> None:
    text = MINIMAL + 'efa = true\nplacement_group = "hpc-efa"\n'
    template = load_settings(write(tmp_path, text)).template("t1")
    assert template.fabric == "efa"
    assert load_settings(write(tmp_path, MINIMAL)).template("t1").fabric is None


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            "efa = true\n",
            "template 't1': efa needs placement_group (EFA traffic needs a cluster placement "
            "group): set placement_group",
        ),
        (
            'infiniband = true\nplacement_group = "pg"\n',
            "template 't1': infiniband is for azure providers; 'aws1' is a aws provider: remove it",
        ),
        (
            'vnic_type = "direct"\n',
            "template 't1': vnic_type is for openstack providers; 'aws1' is a aws provider: "
            "remove it",
        ),
    ],
)
def test_a_fabric_key_out_of_place_is_one_line(tmp_path: Path, extra: str, line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, MINIMAL + extra))
    assert line in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.exit_code == 2


def test_config_check_refuses_a_fabric_key_with_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "efa = true\n")
    done = run_cli("config", "check", "--no-slurm", env={"CLUSTERMGR_CONFIG": str(path)})
    assert done.returncode == 2
    assert "efa needs placement_group" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_infiniband_on_azure_needs_a_proximity_placement_group(tmp_path: Path) -> None:
    text = MINIMAL.replace("[[templates]]", AZURE + "[[templates]]")
    text = text.replace('provider = "aws1"', 'provider = "az1"').replace(
        'image = "ami-1"', 'image = "/subscriptions/s/images/i"'
    )
    with pytest.raises(ConfigError, match="infiniband needs placement_group"):
        load_settings(write(tmp_path, text + "infiniband = true\n"))
    ppg = (
        "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/proximityPlacementGroups/p"
    )
    settings = load_settings(
        write(tmp_path, text + f'infiniband = true\nplacement_group = "{ppg}"\n')
    )
    assert settings.template("t1").fabric == "infiniband"


def test_per_launch_placement_gives_a_fabric_its_group(tmp_path: Path) -> None:
    text = MINIMAL + 'efa = true\nplacement = "per-launch"\n'
    assert load_settings(write(tmp_path, text)).template("t1").placement == "per-launch"
    with pytest.raises(ConfigError, match="remove placement_group"):
        load_settings(write(tmp_path, text + 'placement_group = "pg"\n'))


def test_the_catalog_refuses_infiniband_on_a_size_without_it(tmp_path: Path) -> None:
    text = MINIMAL.replace("[[templates]]", AZURE + "[[templates]]")
    text = text.replace('provider = "aws1"', 'provider = "az1"')
    text = text.replace('image = "ami-1"', 'image = "/subscriptions/s/images/i"')
    text = text.replace("instance_types = [", 'instance_types = ["Standard_ND96asr_v4", ')
    settings = load_settings(
        write(tmp_path, text + 'infiniband = true\nplacement = "per-launch"\n')
    )
    template = settings.template("t1")
    rows = [
        InstanceTypeRow(provider="az1", name=name, fabrics=fabrics)
        for name, fabrics in zip(template.instance_types, ("infiniband", ""), strict=False)
    ]
    lacking = template.instance_types[1]
    assert unfit_fabrics(settings, rows) == [
        f"template t1: infiniband = true, but instance type {lacking} has no InfiniBand "
        "(provider az1's catalog: resource SKU capability RdmaEnabled); choose a type with it "
        "or remove infiniband"
    ]
    unknown = [InstanceTypeRow(provider="az1", name=lacking, fabrics=None)]
    assert unfit_fabrics(settings, unknown) == []  # the catalog does not say: not judged

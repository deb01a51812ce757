"""Templates naming an image definition: which `image` values config check takes, what a
launch boots in the template's region, and the user-data rendered with the region's facts."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.core.errors import ConfigError
from clustermgr.db.database import Database
from clustermgr.db.models import Image, ImageReplica, MachineImage, Provider
from clustermgr.directors import states
from clustermgr.imaging.launch_images import (
    ImageUnavailable,
    RegionImage,
    check_template_images,
    launch_image,
    launch_user_data,
    region_images,
    template_definitions,
)
from clustermgr.nodes.bootstrap import KeyFetch
from clustermgr.scaling.clamp import LaunchOrder
from clustermgr.scaling.specs import LaunchSpecs

pytestmark = pytest.mark.unit

AMI = "ami-0123456789abcdef0"
TEMPLATE_TEXT = (
    "#cloud-config\n# @{image} @{revision} via @{director_address}\n"
    "mounts: @{nfs_mounts}\nbootstrap: @{bootstrap_b64}\n"
)
PROVIDERS = {
    "aws-west": {"type": "aws", "region": "us-west-2"},
    "aws-east": {"type": "aws", "region": "us-east-1"},
    "az": {"type": "azure", "region": "eastus", "subscription_id": "s", "resource_group": "rg"},
    "os": {
        "type": "openstack",
        "region": "RegionOne",
        "credentials": {"source": "clouds_yaml", "cloud": "c"},
    },
}


def definitions(directory: Path) -> Path:
    directory.mkdir(exist_ok=True)
    (directory / "node.tmpl").write_text(TEMPLATE_TEXT)
    (directory / "node.toml").write_text(
        f'name = "node"\ntree = "/srv/node"\nuser_data = "node.tmpl"\n'
        f'[base.aws]\nimage = "{AMI}"\nregion = "us-east-1"\n'
        '[base.openstack]\nimage = "rocky9-cuda"\n'
        '[[nfs_mounts]]\nserver = "head"\nexport = "/home"\npath = "/home"\n'
        '[[nfs_mounts]]\nserver = "director"\nexport = "/srv/node/opt/site"\n'
        'path = "/opt/site"\noptions = "ro"\n'
    )
    return directory


def settings_for(tmp_path: Path, provider: str, image: str) -> Settings:
    key = tmp_path / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(64))
    data: dict[str, Any] = {
        "cluster": {"name": "burst", "head_address": "10.9.0.1"},
        "slurm": {"munge_key_path": str(key)},
        "daemon": {"state_dir": str(tmp_path / "state")},
        "images": {"definitions_dir": str(definitions(tmp_path / "defs"))},
        "providers": [{"name": provider, **PROVIDERS[provider]}],
        "templates": [
            {
                "name": "gpu",
                "provider": provider,
                "nodes": "gpu-[1-2]",
                "instance_types": ["x"],
                "cpus": 4,
                "memory_mb": 1000,
                "partition": "cloud",
                "image": image,
            }
        ],
    }
    return parse_settings(data)


@pytest.mark.parametrize(
    ("provider", "image"),
    [
        ("aws-west", "node"),
        ("aws-west", AMI),
        ("aws-west", "resolve:ssm:/aws/service/ami"),
        ("az", "microsoft-dsvm:ubuntu-hpc:2204:latest"),
        ("az", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/images/n"),
        ("os", "node"),
        ("os", "rocky9-cuda"),  # any Glance name
    ],
)
def test_config_check_takes_a_definition_or_a_plausible_machine_image(
    tmp_path: Path, provider: str, image: str
) -> None:
    check_template_images(settings_for(tmp_path, provider, image))


@pytest.mark.parametrize(
    ("provider", "image", "said"),
    [
        ("aws-west", "nod", "'nod' is neither an image definition in"),
        ("aws-west", "nod", "did you mean 'node'?"),
        ("aws-west", "ubuntu", "nor a machine-image id for aws (ami-... or resolve:ssm:"),
        ("az", "ubuntu-hpc", "nor a machine-image id for azure (publisher:offer:sku:version"),
        ("az", "node", "image 'node' ("),  # a definition without [base.azure]
        ("os", "nodes", "did you mean 'node'?"),  # a Glance name one letter off a definition
    ],
)
def test_config_check_refuses_anything_else_in_one_line(
    tmp_path: Path, provider: str, image: str, said: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        check_template_images(settings_for(tmp_path, provider, image))
    line = str(refused.value)
    assert line.startswith("templates[0:gpu].image: ") and said in line
    assert "\n" not in line


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def images_now(db: Database, settings: Settings) -> dict[str, RegionImage]:
    """What a cycle reads: the definitions loaded with the configuration, the database's
    copies, directors and revisions now."""
    with db.session() as session:
        return region_images(session, settings, template_definitions(settings))


def director(db: Database, provider: str, address: str | None, revisions: dict[str, str]) -> None:
    """The region's director READY at `address`, with its replicas of `revisions` (state)."""
    with db.session() as session:
        spec = PROVIDERS[provider]
        session.add(
            Provider(
                name=provider, type=spec["type"], region=spec["region"], credentials_source="x"
            )
        )
        session.flush()
        row = states.ensure(session, provider, spec["region"], actor="test")
        row.state = states.DirectorState.READY.value
        row.private_address = address
        for version, state in revisions.items():
            image = Image(name="node", version=version, checksum=version, size_bytes=1)
            session.add(image)
            session.flush()
            session.add(ImageReplica(image_id=image.id, director_id=row.id, state=state))


def test_the_copy_in_the_region_is_booted_once_available(tmp_path: Path, db: Database) -> None:
    settings = settings_for(tmp_path, "aws-west", "node")
    director(db, "aws-west", "10.9.0.5", {"r1-aaa": "verified"})
    with pytest.raises(ImageUnavailable, match=r"is not copied there yet \(cm-scale starts"):
        launch_image(images_now(db, settings)["gpu"])
    with db.session() as session:
        session.add(
            MachineImage(
                image_name="node",
                provider_name="aws-west",
                region="us-west-2",
                source_image=AMI,
                image_id="ami-0copy",
                state="pending",
                error="",
            )
        )
    with pytest.raises(ImageUnavailable, match=r"is being copied \(ami-0copy\)"):
        launch_image(images_now(db, settings)["gpu"])
    with db.session() as session:
        session.query(MachineImage).one().state = "available"
    assert launch_image(images_now(db, settings)["gpu"]) == "ami-0copy"


def test_in_the_base_images_own_region_the_base_image_is_booted(
    tmp_path: Path, db: Database
) -> None:
    settings = settings_for(tmp_path, "aws-east", "node")
    director(db, "aws-east", "10.9.0.5", {})
    assert launch_image(images_now(db, settings)["gpu"]) == AMI


def test_a_director_mount_needs_a_serving_director_with_a_usable_address(
    tmp_path: Path, db: Database
) -> None:
    settings = settings_for(tmp_path, "os", "node")
    assert "no director serving yet" in images_now(db, settings)["gpu"].problem
    director(db, "os", "10.9.0.5 nodehostname=evil", {})
    with pytest.raises(ImageUnavailable, match="no director serving yet"):
        launch_image(images_now(db, settings)["gpu"])


def test_user_data_carries_the_regions_facts_and_the_revision_its_director_serves(
    tmp_path: Path, db: Database
) -> None:
    settings = settings_for(tmp_path, "os", "node")
    director(
        db, "os", "10.9.0.5", {"r1-aaa": "verified", "r2-bbb": "verified", "r3-ccc": "pending"}
    )
    found = images_now(db, settings)["gpu"]
    key = KeyFetch("https://10.9.0.1:6830/munge-key", "sha256//pin", "tok-secret")

    text = launch_user_data(settings, found, "openstack", "22.05.8", key)

    assert launch_image(found) == "rocky9-cuda"
    assert "# node r2-bbb via 10.9.0.5" in text  # the newest revision verified there
    assert '["10.9.0.1:/home", "/home", nfs, "defaults,_netdev"]' in text
    assert '["10.9.0.5:/srv/node/opt/site", "/opt/site", nfs, "ro"]' in text
    boot = base64.b64decode(text.split("bootstrap: ", 1)[1].split("\n", 1)[0]).decode()
    assert "KEY_TOKEN='tok-secret'" in boot and "KEY_PIN='sha256//pin'" in boot
    assert "CONTROLLER_VERSION='22.05.8'" in boot


def test_a_definition_that_does_not_load_is_a_config_error_only_where_a_template_names_it(
    tmp_path: Path,
) -> None:
    named = settings_for(tmp_path, "aws-west", "node")
    raw = settings_for(tmp_path, "aws-west", AMI)
    (tmp_path / "defs" / "node.toml").write_text('name = "node"\n')
    with pytest.raises(ConfigError, match=r"node.toml: tree: ") as refused:
        template_definitions(named)
    assert "\n" not in str(refused.value)
    assert template_definitions(raw) == {}  # a raw-id site reads no definition at all


def test_a_raw_machine_image_id_keeps_booting_the_plain_boot_script(
    tmp_path: Path, db: Database
) -> None:
    settings = settings_for(tmp_path, "aws-west", AMI)
    specs = LaunchSpecs(settings, lambda: datetime.now(UTC), "22.05.8", images_now(db, settings))
    spec = specs(LaunchOrder("gpu", ("gpu-1",), "on-demand", "req-raw-1", "test"))
    assert spec.image == AMI
    assert spec.user_data.startswith("#!/bin/sh\n# clustermgr burst-node bootstrap")


def test_the_engine_reads_the_definitions_once_with_the_configuration(
    tmp_path: Path, db: Database
) -> None:
    """A cycle reads the copies, directors and revisions, never images/*.toml again: the
    definition gone from disk after the start changes nothing until a reload."""
    from clustermgr.scaling.engine import Engine

    raw = settings_for(tmp_path, "aws-east", AMI)
    settings = settings_for(tmp_path, "aws-east", "node")
    director(db, "aws-east", "10.9.0.5", {"r1-aaa": "verified"})
    engine = Engine(settings, db)
    (tmp_path / "defs" / "node.toml").unlink()
    with db.session() as session:
        found = region_images(session, settings, engine.images)["gpu"]
    assert launch_image(found) == AMI and found.revision == "r1-aaa"
    (tmp_path / "defs" / "node.toml").write_text("name = \n")  # broken: a reload refuses it
    with pytest.raises(ConfigError, match=r"node.toml: invalid TOML"):
        Engine(settings, db)
    assert Engine(raw, db).images == {}  # a raw-id site reads none, broken or not

"""A template that names an image definition launches that image's machine image in its
region, with the image's user-data rendered for the region (its director's address, the
revision the director serves, the launch's munge-key token), through each cloud's real SDK
against its local fake. (A raw machine-image id: tests/unit/test_template_images.py.)"""

from __future__ import annotations

import base64
import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from clustermgr.config import ProviderSettings, Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import Image, ImageReplica, Provider
from clustermgr.directors import states
from clustermgr.imaging.definitions import find_image
from clustermgr.imaging.launch_images import (
    ImageUnavailable,
    RegionImage,
    region_images,
    template_definitions,
)
from clustermgr.imaging.machine_images import copy_base_images, refresh, start_copies
from clustermgr.providers.registry import make_provider
from clustermgr.scaling.clamp import LaunchOrder
from clustermgr.scaling.specs import LaunchSpecs
from tests.fakes import aws_harness, azure_harness, openstack_harness
from tests.fakes.aws_harness import IMAGE as AMI

pytestmark = pytest.mark.integration

DIRECTOR_ADDRESS = "10.9.0.5"
REVISION = "r3-0123456789ab"
GALLERY = (
    "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute"
    "/galleries/gal/images/compute/versions/1.0.0"
)
USER_DATA = (
    "#cloud-config\n# @{image} @{revision} on @{provider_type}\n"
    "mounts: @{nfs_mounts}\nbootstrap: @{bootstrap_b64}\n"
)


def write_definition(directory: Path, azure_image: str) -> Path:
    directory.mkdir(exist_ok=True)
    (directory / "node.tmpl").write_text(USER_DATA)
    (directory / "node.toml").write_text(
        f'name = "node"\ntree = "{directory}"\nuser_data = "node.tmpl"\n'
        f'[base.aws]\nimage = "{AMI}"\nregion = "us-east-1"\n'
        f'[base.azure]\nimage = "{azure_image}"\n'
        '[base.openstack]\nimage = "ubuntu-24.04"\n'
        '[[nfs_mounts]]\nserver = "director"\nexport = "/srv/image/opt/site"\n'
        'path = "/opt/site"\noptions = "ro"\n'
    )
    return directory


def settings_with(tmp_path: Path, provider: ProviderSettings, **template: Any) -> Settings:
    key = tmp_path / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
    return parse_settings(
        {
            "cluster": {"name": "burst", "head_address": "10.9.0.1"},
            "daemon": {"state_dir": str(tmp_path / "state")},
            "slurm": {"munge_key_path": str(key)},
            "images": {"definitions_dir": str(tmp_path / "defs")},
            "providers": [provider.model_dump(exclude_unset=True)],
            "templates": [
                {
                    "name": "gpu",
                    "provider": provider.name,
                    "nodes": "gpu-[1-2]",
                    "cpus": 4,
                    "memory_mb": 1000,
                    "partition": "cloud",
                    "image": "node",
                    **template,
                }
            ],
        }
    )


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def images_now(db: Database, settings: Settings) -> dict[str, RegionImage]:
    """What a cycle reads: the definitions loaded with the configuration, the database's
    copies, directors and revisions now."""
    with db.session() as session:
        return region_images(session, settings, template_definitions(settings))


def serve_revision(db: Database, provider: ProviderSettings) -> None:
    """The region's director READY at DIRECTOR_ADDRESS, serving REVISION (verified)."""
    with db.session() as session:
        session.add(
            Provider(
                name=provider.name,
                type=provider.type,
                region=provider.region,
                credentials_source="x",
            )
        )
        session.flush()
        director = states.ensure(session, provider.name, provider.region, actor="test")
        director.state = states.DirectorState.READY.value
        director.private_address = DIRECTOR_ADDRESS
        image = Image(name="node", version=REVISION, checksum="0123", size_bytes=1)
        session.add(image)
        session.flush()
        session.add(ImageReplica(image_id=image.id, director_id=director.id, state="verified"))


def launch_spec(db: Database, settings: Settings) -> Any:
    order = LaunchOrder("gpu", ("gpu-1",), "on-demand", "req-img-1", "test")
    specs = LaunchSpecs(settings, lambda: datetime.now(UTC), "22.05.8", images_now(db, settings))
    return specs(order)


def decoded(user_data: str) -> str:
    return base64.b64decode(user_data).decode()


def assert_rendered(user_data: str, provider_type: str) -> None:
    assert f"# node {REVISION} on {provider_type}" in user_data
    assert f'["{DIRECTOR_ADDRESS}:/srv/image/opt/site", "/opt/site", nfs, "ro"]' in user_data
    boot = decoded(user_data.split("bootstrap: ", 1)[1].split("\n", 1)[0])
    assert "KEY_URL='https://10.9.0.1:6830/munge-key'" in boot
    assert "KEY_TOKEN=''" not in boot  # the request's one-time token is in the script


def test_aws_template_launches_the_regions_copy_with_the_rendered_user_data(
    db: Database, tmp_path: Path
) -> None:
    write_definition(tmp_path / "defs", "a:b:c:d")
    with aws_harness.contract_harness(tmp_path) as harness:
        west = aws_harness.settings_for(harness.fake, "aws-west", region="us-west-2")
        ec2 = boto3.client("ec2", region_name="us-west-2", endpoint_url=harness.fake.url)
        subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
        settings = settings_with(tmp_path, west, instance_types=["g5.xlarge"], subnets=[subnet])
        serve_revision(db, west)
        with pytest.raises(ImageUnavailable, match=r"in us-west-2: .* is not copied there yet"):
            launch_spec(db, settings)

        [copy] = copy_base_images(db, settings, find_image(tmp_path / "defs", "node"))
        spec = launch_spec(db, settings)
        result = make_provider(west, "burst").launch(spec, 1, "req-img-1")

        assert result.ok, result.errors
        [instance] = ec2.describe_instances()["Reservations"][0]["Instances"]
        assert copy.image_id and instance["ImageId"] == copy.image_id != AMI
        attribute = ec2.describe_instance_attribute(
            InstanceId=instance["InstanceId"], Attribute="userData"
        )
        assert_rendered(decoded(attribute["UserData"]["Value"]), "aws")


def test_azure_template_launches_the_gallery_image_with_the_rendered_user_data(
    db: Database, tmp_path: Path
) -> None:
    with azure_harness.contract_harness(tmp_path) as harness:
        gallery = GALLERY.format(sub=harness.fake.subscription_id, rg=harness.fake.resource_group)
        write_definition(tmp_path / "defs", gallery)
        provider = harness.settings(name="azure-east")
        settings = settings_with(
            tmp_path,
            provider,
            instance_types=["Standard_NC24ads_A100_v4"],
            subnets=[harness.fake.vnet_subnet],
        )
        serve_revision(db, provider)
        result = make_provider(provider, "burst").launch(launch_spec(db, settings), 1, "r-1")

        assert result.ok, result.errors
        [name] = harness.fake.vm_names()
        props = harness.fake.vm(name)["properties"]
        assert props["storageProfile"]["imageReference"]["id"] == gallery
        assert_rendered(decoded(props["userData"]), "azure")


def test_openstack_template_launches_the_glance_image_with_the_rendered_user_data(
    db: Database, tmp_path: Path
) -> None:
    write_definition(tmp_path / "defs", "a:b:c:d")
    with openstack_harness.contract_harness(tmp_path) as harness:
        provider = harness.settings(name="os-east")
        settings = settings_with(
            tmp_path,
            provider,
            instance_types=list(openstack_harness.DEFAULT_FLAVORS),
            network="burst-net",
            key_name="burst-key",
        )
        serve_revision(db, provider)
        made = openstack_harness.fast(make_provider(provider, "burst"))
        result = made.launch(launch_spec(db, settings), 1, "req-img-1")

        assert result.ok, result.errors
        [server] = harness.fake.state.servers.values()
        assert server["image"] == harness.fake.images["ubuntu-24.04"]
        assert_rendered(decoded(server["user_data"]), "openstack")


def test_azure_template_launches_the_gallery_version_once_replicated_into_its_region(
    db: Database, tmp_path: Path
) -> None:
    """The base is a gallery image version in westus only; the template's region is the
    fake's (eastus): the launch waits while cm-scale adds eastus to the version's target
    regions, then boots the version by its own id."""
    with azure_harness.contract_harness(tmp_path) as harness:
        fake = harness.fake
        fake.galleries.add("gal", "compute", "2.0.0", ["westus"])
        gallery = GALLERY.format(sub=fake.subscription_id, rg=fake.resource_group)
        gallery = gallery.replace("/1.0.0", "/2.0.0")
        defs = write_definition(tmp_path / "defs", gallery)
        toml = defs / "node.toml"
        toml.write_text(
            toml.read_text().replace(
                f'[base.azure]\nimage = "{gallery}"\n',
                f'[base.azure]\nimage = "{gallery}"\nregion = "westus"\n',
            )
        )
        provider = harness.settings(name="azure-east")
        settings = settings_with(
            tmp_path,
            provider,
            instance_types=["Standard_NC24ads_A100_v4"],
            subnets=[fake.vnet_subnet],
        )
        serve_revision(db, provider)
        with pytest.raises(ImageUnavailable, match=r"in eastus: .* is not copied there yet"):
            launch_spec(db, settings)
        # booted as it is, the version is refused in eastus (not replicated there)
        made = make_provider(provider, "burst")
        refused = made.launch(replace(launch_spec_raw(settings), image=gallery), 1, "r-0")
        assert not refused.ok and "GalleryImageNotFound" in str(refused.errors)

        image = template_definitions(settings)["node"]
        [copy] = start_copies(db, settings, image, {"azure-east"})
        assert copy.state == "pending" and copy.image_id == gallery  # replicating
        with pytest.raises(ImageUnavailable, match=r"is being copied"):
            launch_spec(db, settings)
        start_copies(db, settings, image, {"azure-east"})  # followed, not asked again
        assert fake.galleries.updates == 2  # the replication and the tags, once each
        [done] = refresh(db, settings, "node")
        assert done.state == "available"

        result = made.launch(launch_spec(db, settings), 1, "r-1")
        assert result.ok, result.errors
        [name] = [n for n in fake.vm_names() if fake.vm(n)["properties"].get("userData")]
        props = fake.vm(name)["properties"]
        assert props["storageProfile"]["imageReference"]["id"] == gallery
        assert_rendered(decoded(props["userData"]), "azure")
        version = fake.galleries.versions[("gal", "compute", "2.0.0")]
        assert set(version.regions) == {"westus", "eastus"}
        assert version.tags["clustermgr-image"] == "node"


def launch_spec_raw(settings: Settings) -> Any:
    """The plain spec of a raw-id launch (the template's image as a machine-image id)."""
    order = LaunchOrder("gpu", ("gpu-2",), "on-demand", "req-raw-0", "test")
    return LaunchSpecs(settings, lambda: datetime.now(UTC), "22.05.8")(order)

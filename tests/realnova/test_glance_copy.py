"""An OpenStack machine-image copy between two real Glances, and the copy booted by the real
Nova: the plane's RegionOne (nova, glance-api) and a RegionTwo that has only a second
glance-api of its own (tests/services/openstack/controlplane.py `start_image_region`). The
template launches in RegionOne; its image definition's base is a Glance image of RegionTwo.
A scale cycle only requests the copy; cm-scale's director-sync job uploads it from the head,
streamed (never the whole image in memory), and checks Glance's own hashes; the launch then
boots the copy's id."""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from clustermgr.db.database import Database
from clustermgr.imaging.launch_images import ImageUnavailable, template_definitions
from clustermgr.imaging.machine_images import refresh, start_copies
from clustermgr.providers.registry import make_provider
from tests.fakes.openstack_harness import clouds_yaml_env, fast, settings_for
from tests.integration.test_glance_copies import director_sync_job, openstack_definition
from tests.integration.test_template_images import (
    assert_rendered,
    decoded,
    launch_spec,
    serve_revision,
    settings_with,
)
from tests.realnova import harness
from tests.services.openstack import controlplane
from tests.services.openstack.controlplane import ControlPlane, ImageRegion

SOURCE_IMAGE = "rocky9-cuda-src"
IMAGE_BYTES = 48 * 1024 * 1024  # twelve of the copy's 4 MiB chunks
CLOUD = "realnova-regions"


@pytest.fixture(scope="module")
def image_region(plane: ControlPlane) -> Iterator[ImageRegion]:
    made = controlplane.start_image_region(plane)
    try:
        yield made
    finally:
        controlplane.stop_image_region(plane, made)


@pytest.fixture
def clouds_yaml(plane: ControlPlane, tmp_path: Path) -> Iterator[Path]:
    """The burst user's cloud, naming both regions (openstacksdk refuses any other), and the
    plain one: with a single cloud in the file, openstacksdk would take it as the default
    of every connection, the plane's admin connections included."""
    burst = controlplane.BURST_PROJECT
    entry = plane.cloud(burst, burst, plane.burst_password)
    plain = plane.cloud(burst, burst, plane.burst_password)
    entry["regions"] = [controlplane.REGION, controlplane.IMAGE_REGION]
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump({"clouds": {CLOUD: entry, harness.GOOD_CLOUD: plain}}))
    path.chmod(0o600)
    with clouds_yaml_env(path):
        yield path


def test_the_copy_is_uploaded_between_two_real_glances_and_booted_by_nova(
    plane: ControlPlane,
    image_region: ImageRegion,
    clouds_yaml: Path,
    sqlite_db: Database,
    tmp_path: Path,
) -> None:
    import openstack

    db = sqlite_db
    harness.ensure_keypair(plane, plane.workdir)
    auth = plane.cloud(controlplane.BURST_PROJECT, controlplane.BURST_PROJECT, plane.burst_password)
    source_glance = openstack.connect(**auth["auth"], region_name=image_region.region).image
    target_glance = plane.burst().image
    data = os.urandom(IMAGE_BYTES)
    source = source_glance.create_image(
        SOURCE_IMAGE, data=data, disk_format="raw", container_format="bare", wait=True
    )
    try:
        assert target_glance.find_image(SOURCE_IMAGE) is None  # RegionOne's Glance lacks it
        openstack_definition(tmp_path, SOURCE_IMAGE, image_region.region)
        provider = settings_for(CLOUD, controlplane.REGION, name="os-one")
        settings = settings_with(
            tmp_path,
            provider,
            instance_types=["g1.small"],
            network=controlplane.NETWORK,
            key_name=harness.KEY_NAME,
        )
        serve_revision(db, provider)
        image = template_definitions(settings)["node"]
        with pytest.raises(ImageUnavailable, match=r"in RegionOne: .* is not copied there yet"):
            launch_spec(db, settings)
        [requested] = start_copies(db, settings, image, {"os-one"})  # the scale cycle's part
        assert (requested.state, requested.image_id) == ("pending", None)

        tracemalloc.start()
        try:
            lines = director_sync_job(db, settings)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        print(f"\nthe {IMAGE_BYTES}-byte copy peaked at {peak} bytes traced")
        assert lines == ["machine image node to RegionOne: available"], lines
        assert peak < IMAGE_BYTES / 2, f"{peak} bytes at the peak of a {IMAGE_BYTES}-byte copy"

        [copy] = refresh(db, settings, "node")
        assert copy.state == "available" and copy.image_id
        made = target_glance.get_image(copy.image_id)
        assert made.status == "active" and made.size == IMAGE_BYTES
        assert (made.hash_algo, made.hash_value) == ("sha512", hashlib.sha512(data).hexdigest())
        assert made.properties["clustermgr-image"] == "node"

        nova = fast(make_provider(provider, "burst"), harness.TIMING)
        result = nova.launch(launch_spec(db, settings), 1, "req-glance-real-1")
        assert result.ok, result.errors
        # user_data is an extended server attribute: the admin's to see
        server = plane.admin().compute.get_server(result.instances[0].instance_id)
        assert server.image.id == copy.image_id
        assert_rendered(decoded(server.user_data), "openstack")
    finally:
        harness.RealNovaHarness(plane, clouds_yaml).clean()
        for glance in (target_glance, source_glance):
            for leftover in glance.images(owner=source.owner):
                glance.delete_image(leftover, ignore_missing=True)

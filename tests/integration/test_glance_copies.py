"""An OpenStack template naming an image definition whose base image lives in another region's
Glance: the launch waits with (Code:IMAGE) while the head uploads the image into the
template's region (streamed from the source region's Glance, in the director-sync job, never
in the scale cycle), then boots the copy's id. Failures leave a reason and no active
half-made image, and are retried. Through the real openstacksdk against the OpenStack fake
with a second, image-only region (tests/fakes/glance_fake.py)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clustermgr.config import Settings
from clustermgr.db.database import Database
from clustermgr.db.models import MachineImage
from clustermgr.imaging.launch_images import ImageUnavailable, template_definitions
from clustermgr.imaging.machine_images import (
    copy_base_images,
    refresh,
    start_copies,
    upload_requested,
)
from clustermgr.providers.registry import make_provider
from clustermgr.runtime.daemon import Daemon
from clustermgr.runtime.director_sync import DirectorSync
from tests.fakes import openstack_harness
from tests.fakes.openstack_harness import OpenStackHarness
from tests.integration.test_template_images import (
    assert_rendered,
    decoded,
    launch_spec,
    serve_revision,
    settings_with,
    write_definition,
)

pytestmark = pytest.mark.integration

SOURCE_REGION = "RegionTwo"
SOURCE_IMAGE = "rocky9-cuda"
IMAGE_BYTES = 9 * 1024 * 1024 + 7  # more than two of the copy's 4 MiB chunks
COPY_NAME = f"burst-node-{SOURCE_IMAGE}"


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[OpenStackHarness]:
    with openstack_harness.contract_harness(tmp_path, image_regions=(SOURCE_REGION,)) as made:
        yield made


@pytest.fixture
def source_data(stack: OpenStackHarness) -> bytes:
    data = os.urandom(IMAGE_BYTES)
    with stack.fake.lock:
        stack.fake.glance(SOURCE_REGION).seed(SOURCE_IMAGE, data)
    return data


def openstack_definition(tmp_path: Path, image: str, region: str) -> None:
    """The image definition `node` of test_template_images, its [base.openstack] the Glance
    image `image` of `region`."""
    defs = write_definition(tmp_path / "defs", "a:b:c:d")
    toml = defs / "node.toml"
    toml.write_text(
        toml.read_text().replace(
            '[base.openstack]\nimage = "ubuntu-24.04"\n',
            f'[base.openstack]\nimage = "{image}"\nregion = "{region}"\n',
        )
    )


def glance_settings(tmp_path: Path, stack: OpenStackHarness) -> Settings:
    """The template in the fake's main region (Nova and Glance), its image's base in the
    image-only RegionTwo."""
    openstack_definition(tmp_path, SOURCE_IMAGE, SOURCE_REGION)
    return settings_with(
        tmp_path,
        stack.settings(name="os-one"),
        instance_types=list(openstack_harness.DEFAULT_FLAVORS),
        network="burst-net",
        key_name="burst-key",
    )


def director_sync_job(db: Database, settings: Settings) -> list[str]:
    """One run of cm-scale's director-sync job, as the daemon runs it (no director queued)."""
    job = DirectorSync(settings, db)
    job.images = template_definitions(settings)
    return job.run_queued()


def copies_named(stack: OpenStackHarness) -> list[dict[str, object]]:
    with stack.fake.lock:
        return stack.fake.glance().named(COPY_NAME)


def test_the_launch_waits_then_boots_the_copy_uploaded_by_the_director_sync_job(
    db: Database, tmp_path: Path, stack: OpenStackHarness, source_data: bytes
) -> None:
    settings = glance_settings(tmp_path, stack)
    provider = stack.settings(name="os-one")
    serve_revision(db, provider)
    image = template_definitions(settings)["node"]
    with pytest.raises(ImageUnavailable, match=rf"in RegionOne: {SOURCE_IMAGE} is not copied"):
        launch_spec(db, settings)

    # the scale cycle only requests the upload: nothing moves, no image is made
    [row] = start_copies(db, settings, image, {"os-one"})
    assert (row.state, row.image_id) == ("pending", None)
    assert stack.fake.requests("POST", "/image/v2/images") == []
    assert stack.fake.requests("GET", "/file") == []
    with pytest.raises(ImageUnavailable, match=r"is being copied \(requested\)"):
        launch_spec(db, settings)

    lines = director_sync_job(db, settings)
    assert lines == ["machine image node to RegionOne: available"]
    [copy] = refresh(db, settings, "node")
    assert copy.state == "available" and copy.image_id and copy.error == ""
    with stack.fake.lock:
        glance = stack.fake.glance()
        stored = glance.view(glance.images[copy.image_id])
        assert glance.data(copy.image_id) == source_data
    assert stored["status"] == "active" and stored["visibility"] == "private"
    assert stored["os_hash_value"] == hashlib.sha512(source_data).hexdigest()
    assert (stored["clustermgr-cluster"], stored["clustermgr-image"]) == ("burst", "node")
    # the data went through in chunks: one upload, one download
    assert len(stack.fake.requests("PUT", "/image/v2/images/")) == 1
    assert len(stack.fake.requests("GET", f"/image-{SOURCE_REGION}/v2/images/")) >= 1

    made = openstack_harness.fast(make_provider(provider, "burst"))
    result = made.launch(launch_spec(db, settings), 1, "req-glance-1")
    assert result.ok, result.errors
    [server] = stack.fake.servers()
    assert server["image"] == copy.image_id
    assert_rendered(decoded(server["user_data"]), "openstack")
    assert director_sync_job(db, settings) == []  # nothing left to upload


def fail_missing(stack: OpenStackHarness) -> None:
    with stack.fake.lock:
        glance = stack.fake.glance(SOURCE_REGION)
        [source] = glance.named(SOURCE_IMAGE)
        glance.images[source["id"]]["name"] = "renamed"


def fail_quota(stack: OpenStackHarness) -> None:
    with stack.fake.lock:
        stack.fake.glance().quota_bytes = IMAGE_BYTES  # the seeded image uses some already


def fail_corrupt(stack: OpenStackHarness) -> None:
    with stack.fake.lock:
        stack.fake.glance().corrupt_uploads = 1


def heal(stack: OpenStackHarness) -> None:
    with stack.fake.lock:
        for glance in stack.fake.glances.values():
            glance.quota_bytes, glance.corrupt_uploads = None, 0
            for image in glance.images.values():
                if image["name"] == "renamed":
                    image["name"] = SOURCE_IMAGE


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (fail_missing, rf"^\(Code:INVALID\) SourceImageNotFound: .*'{SOURCE_IMAGE}' is not in "),
        (fail_quota, r"^\(Code:QUOTA\) HTTP413: .*Image exceeds the storage quota"),
        (fail_corrupt, r"^\(Code:OTHER\) ChecksumMismatch: .* does not match its source"),
    ],
    ids=["source-missing", "quota", "checksum-mismatch"],
)
def test_a_failed_upload_leaves_a_reason_no_active_image_and_is_retried(
    db: Database,
    tmp_path: Path,
    stack: OpenStackHarness,
    source_data: bytes,
    fault: Callable[[OpenStackHarness], None],
    reason: str,
) -> None:
    settings = glance_settings(tmp_path, stack)
    serve_revision(db, stack.settings(name="os-one"))
    image = template_definitions(settings)["node"]
    start_copies(db, settings, image, {"os-one"})
    fault(stack)

    director_sync_job(db, settings)
    [failed] = refresh(db, settings, "node")
    assert failed.state == "failed" and failed.image_id is None
    assert re.search(reason, failed.error), failed.error
    assert "\n" not in failed.error
    assert copies_named(stack) == []  # no half-made image, active or not
    with pytest.raises(ImageUnavailable, match=r"its copy failed: .*images sync retries it"):
        launch_spec(db, settings)
    # the cycle does not ask again, nor does the job before a sync interval has passed
    start_copies(db, settings, image, {"os-one"})
    assert director_sync_job(db, settings) == []

    heal(stack)
    [retried] = upload_requested(db, settings, {"node": image}, retry_after_s=0)
    assert retried.state == "available", retried.error
    [copy] = copies_named(stack)
    assert copy["id"] == retried.image_id and copy["status"] == "active"


def test_a_leftover_of_a_cut_off_upload_is_replaced_and_a_made_copy_reused(
    db: Database, tmp_path: Path, stack: OpenStackHarness, source_data: bytes
) -> None:
    """cm-scale stopped mid-upload: the image it made is still `queued` (or `saving`) with
    the copy's token. `clustermgr images sync` deletes it and uploads again; a second sync
    finds the finished copy by its token and uploads nothing."""
    settings = glance_settings(tmp_path, stack)
    image = template_definitions(settings)["node"]
    token = hashlib.sha256(f"burst/node/{SOURCE_IMAGE}/RegionOne".encode()).hexdigest()
    with stack.fake.lock:
        glance = stack.fake.glance()
        cut = glance._new({"name": COPY_NAME, "clustermgr-copy-token": token})
        cut["status"] = "saving"
        glance.images[cut["id"]] = cut

    [copy] = copy_base_images(db, settings, image)
    assert copy.state == "available" and copy.image_id != cut["id"]
    assert [c["id"] for c in copies_named(stack)] == [copy.image_id]

    with db.session() as session:  # the row lost (say a restore): the copy is found again
        session.query(MachineImage).delete()
    uploads = len(stack.fake.requests("PUT"))
    [again] = copy_base_images(db, settings, image)
    assert again.image_id == copy.image_id and len(stack.fake.requests("PUT")) == uploads


def test_cm_scale_runs_the_upload_job_without_directors(
    db: Database, tmp_path: Path, stack: OpenStackHarness, source_data: bytes
) -> None:
    """A site with no directors whose template names an image still gets its uploads: the
    daemon schedules its director-sync job, which knows the templates' definitions."""
    settings = glance_settings(tmp_path, stack)
    assert not settings.directors
    daemon = Daemon(tmp_path / "clustermgr.toml", settings, db)
    daemon._schedule()
    assert daemon.scheduler.get_job("director-sync") is not None
    start_copies(db, settings, daemon.engine.images["node"], {"os-one"})
    assert daemon.lock.try_acquire()  # only the leader writes (its writes are fenced)
    try:
        assert daemon.director_sync.run_queued() == ["machine image node to RegionOne: available"]
    finally:
        daemon.lock.release()


def test_a_source_glance_that_breaks_off_leaves_the_copy_requested_for_the_next_run(
    db: Database, tmp_path: Path, stack: OpenStackHarness, source_data: bytes
) -> None:
    """A 502 on the source's image data (a proxy in front of its Glance) is transient: the
    row stays requested with the reason, and the job's next run (10 s later in cm-scale)
    makes the copy."""
    settings = glance_settings(tmp_path, stack)
    image = template_definitions(settings)["node"]
    start_copies(db, settings, image, {"os-one"})
    stack.fake.fail_next("GET", f"/image-{SOURCE_REGION}/v2/images/", 502, message="down")

    [line] = director_sync_job(db, settings)
    assert line.startswith("machine image node to RegionOne: pending ((Code:TRANSIENT) HTTP502")
    assert "down" in line and copies_named(stack) == []
    stack.fake.fail_next("GET", "/file", 502, message="cut")  # now on the image's data
    [line] = director_sync_job(db, settings)
    assert "(Code:TRANSIENT) HTTP502" in line and "cut" in line, line
    assert copies_named(stack) == []
    assert director_sync_job(db, settings) == ["machine image node to RegionOne: available"]

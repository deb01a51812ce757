"""Software image replication with real rsync and real files: to a director that is a
directory and to one behind an `rsync --daemon` on a loopback port; revisions only when
the tree changes; a 1% change sends about 1%; a corrupted copy is found and repaired;
the AWS base image copied into the regions in use through the moto server fake."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import Image, ImageReplica, Provider
from clustermgr.directors import states
from clustermgr.imaging.definitions import find_image
from clustermgr.imaging.machine_images import copy_base_images, refresh
from clustermgr.imaging.replication import ReplicaState, sync_all
from clustermgr.imaging.status import replica_status
from clustermgr.imaging.tree_manifest import read_manifest, scan_tree
from tests.fakes.aws_harness import IMAGE, contract_harness
from tests.labs.rsyncd import RsyncDaemon

MB = 1024 * 1024
TEMPLATE = "#cloud-config\n# @{image} via @{director_address}\n"


def make_tree(root: Path, big_files: int, big_size: int, small_files: int) -> int:
    """A tree like an image's: big files, many small ones, an executable, a symlink and a
    hard link. Returns its size in bytes."""
    rng = random.Random(11)
    (root / "opt" / "lib").mkdir(parents=True)
    (root / "etc").mkdir()
    total = 0
    for index in range(big_files):
        (root / "opt" / "lib" / f"big{index:02d}.so").write_bytes(rng.randbytes(big_size))
        total += big_size
    for index in range(small_files):
        data = rng.randbytes(rng.randrange(1000, 20000))
        (root / "etc" / f"conf{index:03d}").write_bytes(data)
        total += len(data)
    tool = root / "opt" / "tool"
    tool.write_bytes(b"#!/bin/sh\necho tool\n")
    tool.chmod(0o755)
    (root / "opt" / "tool-link").symlink_to("tool")
    os.link(root / "etc" / "conf000", root / "etc" / "conf000.hardlink")
    return total + tool.stat().st_size


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    database.upgrade()
    with database.session() as session:
        session.add(Provider(name="lab", type="local", region="lab", credentials_source="none"))
    yield database
    database.dispose()


def add_director(db: Database, region: str, address: str | None = None) -> str:
    with db.session() as session:
        director = states.ensure(session, "lab", region, actor="test")
        director.state = states.DirectorState.READY.value
        director.private_address = address
        return director.name


def settings_for(tmp_path: Path, targets: dict[str, str], **images: Any) -> Settings:
    defs = tmp_path / "defs"
    defs.mkdir(exist_ok=True)
    (defs / "node.cloud-init.tmpl").write_text(TEMPLATE)
    (defs / "node.toml").write_text(
        f'name = "node"\ntree = "{tmp_path / "tree"}"\nuser_data = "node.cloud-init.tmpl"\n'
    )
    key = tmp_path / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
    return parse_settings(
        {
            "daemon": {"state_dir": str(tmp_path / "state")},
            "slurm": {"munge_key_path": str(key)},
            "images": {
                "definitions_dir": str(defs),
                "targets": targets,
                "push_secrets": str(push_secrets_of(tmp_path)),
                **images,
            },
        }
    )


def push_secrets_of(tmp_path: Path) -> Path:
    return tmp_path / "images-push.secrets"


def director_daemon(tmp_path: Path) -> RsyncDaemon:
    """A director's rsync daemon as the lab director runs it: the images read only, and
    the push module for the head, by the password in the secrets file cm-scale writes."""
    return RsyncDaemon(tmp_path / "director-root", push_secrets=push_secrets_of(tmp_path))


def corrupt(path: Path) -> None:
    """Flip one byte in place, keeping size and times (rsync's quick check trusts both)."""
    info = path.stat()
    with path.open("r+b") as handle:
        handle.seek(info.st_size // 2)
        byte = handle.read(1)
        handle.seek(info.st_size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_directory_target_is_synced_verified_and_recorded(db: Database, tmp_path: Path) -> None:
    make_tree(tmp_path / "tree", big_files=3, big_size=MB, small_files=20)
    director = add_director(db, "dir1")
    copy_root = tmp_path / "director"
    settings = settings_for(tmp_path, {director: str(copy_root)})

    report = sync_all(db, settings)

    assert report.ok, report
    [revision] = report.revisions
    assert revision.created and revision.version.startswith("r1-")
    assert (
        revision.manifest_path
        == tmp_path / "state" / "images" / "node" / f"{revision.version}.json"
    )
    manifest = read_manifest(revision.manifest_path)
    assert manifest.tree_hash == revision.tree_hash
    kinds = {e.path: e for e in manifest.entries}
    assert kinds["opt/tool-link"].kind == "symlink" and kinds["opt/tool-link"].target == "tool"
    assert kinds["etc/conf000.hardlink"].link == "etc/conf000"
    assert kinds["opt/tool"].mode == 0o755
    [replica] = report.replicas
    assert replica.state is ReplicaState.VERIFIED
    assert replica.bytes_sent >= revision.size_bytes
    copy = copy_root / "node"
    assert scan_tree(copy).tree_hash == revision.tree_hash
    assert os.stat(copy / "etc" / "conf000").st_ino == os.stat(copy / "etc/conf000.hardlink").st_ino
    with db.session() as session:
        row = session.query(ImageReplica).one()
        assert row.state == "verified" and row.checksum == revision.tree_hash
        assert row.verified_at is not None and row.sync_seconds is not None
        [status] = replica_status(session)
        assert (status.director, status.state, status.revision) == (
            director,
            "verified",
            revision.version,
        )


def test_a_new_revision_only_when_the_tree_changed(db: Database, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    make_tree(tree, big_files=1, big_size=MB, small_files=5)
    settings = settings_for(tmp_path, {})
    first = sync_all(db, settings).revisions[0]
    os.utime(tree / "etc" / "conf001")  # a new time, same content: no new revision
    again = sync_all(db, settings).revisions[0]
    assert not again.created and again.version == first.version
    (tree / "etc" / "conf001").write_bytes(b"changed")
    changed = sync_all(db, settings).revisions[0]
    assert changed.created and changed.version.startswith("r2-")
    assert changed.tree_hash != first.tree_hash
    with db.session() as session:
        assert [row.version for row in session.query(Image).order_by(Image.id)] == [
            first.version,
            changed.version,
        ]


def test_one_percent_change_sends_about_one_percent_to_an_rsync_daemon(
    db: Database, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    size = make_tree(tree, big_files=12, big_size=4 * MB, small_files=100)  # ~50 MB
    with director_daemon(tmp_path) as daemon:
        director = add_director(db, "d1", "127.0.0.1")
        settings = settings_for(tmp_path, {}, rsync_port=daemon.port, rsync_module=daemon.module)
        first = sync_all(db, settings)
        assert first.ok, first
        assert first.replicas[0].bytes_sent >= size
        # ~1%: 64 KiB rewritten inside each of 4 big files, and a new 256 KiB file
        rng = random.Random(5)
        for index in range(4):
            with (tree / "opt" / "lib" / f"big{index:02d}.so").open("r+b") as handle:
                handle.seek(MB)
                handle.write(rng.randbytes(64 * 1024))
        (tree / "opt" / "new.so").write_bytes(rng.randbytes(256 * 1024))

        second = sync_all(db, settings)

        assert second.ok, second
        [replica] = second.replicas
        share = replica.bytes_sent / size
        assert 0.005 < share < 0.03, f"sent {replica.bytes_sent} of {size} bytes ({share:.2%})"
        assert replica.files_sent == 5
        assert scan_tree(daemon.root / "node").tree_hash == second.revisions[0].tree_hash
        assert replica.director == director


def test_a_same_size_change_within_the_second_is_sent(db: Database, tmp_path: Path) -> None:
    """rsync's quick check compares whole seconds unless told otherwise (--modify-window)."""
    tree = tmp_path / "tree"
    make_tree(tree, big_files=1, big_size=MB, small_files=1)
    with director_daemon(tmp_path) as daemon:
        add_director(db, "d1", "127.0.0.1")
        settings = settings_for(tmp_path, {}, rsync_port=daemon.port, rsync_module=daemon.module)
        assert sync_all(db, settings).ok
        big = tree / "opt" / "lib" / "big00.so"
        before = big.stat()
        with big.open("r+b") as handle:
            handle.write(b"x" * 4096)
        os.utime(big, ns=(before.st_atime_ns, before.st_mtime_ns + 1))
        report = sync_all(db, settings)
        assert report.ok, report
        assert report.replicas[0].files_sent == 1


@pytest.mark.parametrize("kind", ["directory", "daemon"])
def test_corrupted_copy_is_detected_then_repaired(db: Database, tmp_path: Path, kind: str) -> None:
    make_tree(tmp_path / "tree", big_files=2, big_size=MB, small_files=10)
    with director_daemon(tmp_path) as daemon:
        if kind == "directory":
            director = add_director(db, "dir1")
            settings = settings_for(tmp_path, {director: str(daemon.root)})
        else:
            director = add_director(db, "d1", "127.0.0.1")
            settings = settings_for(
                tmp_path, {}, rsync_port=daemon.port, rsync_module=daemon.module
            )
        assert sync_all(db, settings).ok
        corrupt(daemon.root / "node" / "opt" / "lib" / "big01.so")

        found = sync_all(db, settings)  # the quick check misses it; verification does not

        [replica] = found.replicas
        assert replica.state is ReplicaState.CORRUPT
        assert "opt/lib/big01.so" in replica.error and not replica.checksum_sync
        with db.session() as session:
            assert session.query(ImageReplica).one().state == "corrupt"

        repaired = sync_all(db, settings)

        [replica] = repaired.replicas
        assert replica.checksum_sync and replica.state is ReplicaState.VERIFIED, replica
        assert replica.files_sent == 1
        assert scan_tree(daemon.root / "node").tree_hash == repaired.revisions[0].tree_hash


def test_unreachable_director_fails_with_one_line(db: Database, tmp_path: Path) -> None:
    make_tree(tmp_path / "tree", big_files=1, big_size=1000, small_files=1)
    add_director(db, "gone", "127.0.0.1")
    settings = settings_for(tmp_path, {}, rsync_port=1)  # nothing listens on port 1
    [replica] = sync_all(db, settings).replicas
    assert replica.state is ReplicaState.FAILED
    url = "rsync://clustermgr@127.0.0.1:1/clustermgr-images-push/node/"
    assert replica.error.startswith(f"rsync to {url} exited")
    assert "\n" not in replica.error


def test_stopped_directors_and_directors_without_address_are_not_synced(
    db: Database, tmp_path: Path
) -> None:
    make_tree(tmp_path / "tree", big_files=1, big_size=1000, small_files=1)
    add_director(db, "noaddr")
    with db.session() as session:
        states.ensure(session, "lab", "stopped", actor="test")
    report = sync_all(db, settings_for(tmp_path, {}))
    assert report.replicas == []
    assert report.errors == ["director director-lab-noaddr: no address yet; not synced"]


def test_base_ami_is_copied_into_each_region_in_use(db: Database, tmp_path: Path) -> None:
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "gpu.tmpl").write_text(TEMPLATE)
    (defs / "gpu.toml").write_text(
        f'name = "gpu"\ntree = "{tmp_path}"\nuser_data = "gpu.tmpl"\n'
        f'[base.aws]\nimage = "{IMAGE}"\nregion = "us-east-1"\n'
    )
    with contract_harness(tmp_path) as harness:
        template = {
            "instance_types": ["g5.xlarge"],
            "image": IMAGE,
            "partition": "cloud",
            "memory_mb": 1000,
        }
        url = harness.fake.url
        providers = [
            {"name": name, "type": "aws", "region": region, "endpoint_url": url}
            for name, region in (
                ("east", "us-east-1"),
                ("west", "us-west-2"),
                ("idle", "eu-west-1"),
            )
        ]
        templates = [
            {"name": name[0], "provider": name, "nodes": f"{name}-[1-2]", "cpus": 4, **template}
            for name in ("east", "west")
        ]
        settings = parse_settings(
            {
                "cluster": {"name": "burst"},
                "images": {"definitions_dir": str(defs)},
                "providers": providers,
                "templates": templates,
            }
        )
        image = find_image(defs, "gpu")

        rows = {r.region: r for r in copy_base_images(db, settings, image)}

        assert set(rows) == {"us-east-1", "us-west-2"}  # eu-west-1 has no template
        assert rows["us-east-1"].image_id == IMAGE and rows["us-east-1"].state == "available"
        west = rows["us-west-2"]
        assert west.image_id and west.image_id != IMAGE and west.state == "available"
        ec2 = boto3.client("ec2", region_name="us-west-2", endpoint_url=harness.fake.url)
        [copied] = ec2.describe_images(ImageIds=[west.image_id])["Images"]
        assert {"Key": "clustermgr-image", "Value": "gpu"} in copied["Tags"]
        # a second run copies nothing again
        again = copy_base_images(db, settings, image)
        assert {r.image_id for r in again} == {IMAGE, west.image_id}
        assert (
            len(
                ec2.describe_images(Filters=[{"Name": "name", "Values": ["burst-gpu-*"]}])["Images"]
            )
            == 1
        )
        # a copy AWS lost is marked failed, with the reason
        ec2.deregister_image(ImageId=west.image_id)
        with db.session() as session:
            from clustermgr.db.models import MachineImage

            session.query(MachineImage).filter_by(region="us-west-2").one().state = "pending"
        [lost] = [r for r in refresh(db, settings, "gpu") if r.region == "us-west-2"]
        assert lost.state == "failed" and west.image_id in lost.error


def test_shipped_image_definitions_load(tmp_path: Path) -> None:
    from clustermgr.imaging.definitions import default_images_dir, load_images

    names = [one.name for one in load_images(default_images_dir())]
    assert "gpu-node" in names
    shutil.rmtree(tmp_path)  # nothing written

"""Software image replication: each image's tree on the head node, to each director.

One sync of (image revision, director):
  1. the replica row goes to `syncing` (its own short transaction; none is held open
     while rsync runs);
  2. rsync sends the tree (rsync.py has the flags and why), with --checksum when the
     director's copy was found corrupt, so a file whose size and time survived the
     damage is compared by content and repaired;
  3. the copy is verified against the revision's manifest: a directory target is hashed
     file by file (sha256) and its tree hash compared; an rsync-daemon target, which we
     cannot read directly, is compared by a checksum dry run (rsync --checksum --dry-run
     --itemize-changes reads every file on both ends) against the head's tree, after the
     head's tree is confirmed to still be the manifest's;
  4. the row becomes `verified` (with the tree hash found and when), `corrupt` (the copy
     differs: the next sync repairs it), `failed` (rsync failed) or `pending` (the head's
     tree changed during the sync: the next revision is sent next time).

`sync_all` is the scheduled job: a new revision of every image whose tree changed, every
serving director brought to it, and the AWS base images copied into the regions in use.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import ImagesSettings, Settings
from clustermgr.core.errors import ClusterMgrError, ConfigError, NotFoundError
from clustermgr.core.inputs import usable_address
from clustermgr.db.database import Database
from clustermgr.db.models import Director, Image, ImageReplica
from clustermgr.directors import push_auth
from clustermgr.directors.push_auth import PUSH_USER, push_module
from clustermgr.directors.states import DirectorState, find
from clustermgr.imaging import rsync
from clustermgr.imaging.definitions import LoadedImage, images_dir, load_images
from clustermgr.imaging.machine_images import MachineImageStatus, copy_base_images
from clustermgr.imaging.tree_manifest import (
    Manifest,
    Revision,
    differences,
    read_manifest,
    record_revision,
    scan_tree,
)

SYNCED_STATES = frozenset({DirectorState.SYNCING, DirectorState.READY, DirectorState.UNHEALTHY})


class ReplicaState(enum.StrEnum):
    PENDING = "pending"  # not synced yet, or the head's tree moved on during the sync
    SYNCING = "syncing"
    VERIFIED = "verified"  # the director's copy matches the manifest
    FAILED = "failed"  # rsync failed; the error says why
    CORRUPT = "corrupt"  # synced, but the copy differs: the next sync uses --checksum
    STALE = "stale"  # the director's instance was replaced (lifecycle): its copy is gone


@dataclass(frozen=True)
class SyncTarget:
    """Where one director's images go: a directory, or rsync://HOST:PORT/MODULE."""

    director: str
    url: str

    @property
    def is_daemon(self) -> bool:
        return rsync.is_daemon_url(self.url)

    def image_dest(self, image: str) -> str:
        return f"{self.url.rstrip('/')}/{image}/"


@dataclass(frozen=True)
class ProgressUpdate:
    image: str
    director: str
    done_bytes: int
    percent: int


@dataclass(frozen=True)
class Verification:
    ok: bool
    checksum: str | None  # the tree hash found on the director (None: not established)
    differing: tuple[str, ...]
    seconds: float
    tree_moved: bool = False  # the head's tree is no longer the manifest's


@dataclass(frozen=True)
class ReplicaResult:
    image: str
    version: str
    director: str
    state: ReplicaState
    bytes_sent: int = 0
    files_sent: int = 0
    tree_bytes: int = 0
    sync_seconds: float = 0.0
    verify_seconds: float = 0.0
    checksum_sync: bool = False  # the transfer compared contents (a repair)
    error: str = ""


@dataclass
class SyncReport:
    revisions: list[Revision] = field(default_factory=list)
    replicas: list[ReplicaResult] = field(default_factory=list)
    machine_images: list[MachineImageStatus] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # an image or director that could not start

    @property
    def ok(self) -> bool:
        return not self.errors and all(r.state is ReplicaState.VERIFIED for r in self.replicas)


ProgressCallback = Callable[[ProgressUpdate], None]


def options_of(images: ImagesSettings) -> rsync.RsyncOptions:
    return rsync.RsyncOptions(acls=images.acls, xattrs=images.xattrs, timeout_s=images.timeout_s)


def target_for(images: ImagesSettings, director: Director) -> SyncTarget | None:
    """[images] targets[director] when set, else the push module of the director's rsync
    daemon at its private address, as the push user (push_auth.py); None while it has no
    address."""
    explicit = images.targets.get(director.name)
    if explicit:
        return SyncTarget(director.name, explicit)
    host = usable_address(director.private_address, f"director {director.name}")
    if host is None:
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    module = push_module(images.rsync_module)
    return SyncTarget(director.name, f"rsync://{PUSH_USER}@{host}:{images.rsync_port}/{module}")


def _replica_row(session: Session, image_id: int, director_id: int) -> ImageReplica:
    row = session.scalars(
        select(ImageReplica).filter_by(image_id=image_id, director_id=director_id)
    ).one_or_none()
    if row is None:
        row = ImageReplica(
            image_id=image_id,
            director_id=director_id,
            state=ReplicaState.PENDING.value,
            bytes_sent=0,
            files_sent=0,
            updated_at=datetime.now(UTC),
        )
        session.add(row)
        session.flush()
    return row


def _found_corrupt(session: Session, image: str, director_id: int) -> bool:
    """Was a copy of this image (any revision) on this director last found corrupt?"""
    states = session.scalars(
        select(ImageReplica.state)
        .join(Image, Image.id == ImageReplica.image_id)
        .where(Image.name == image, ImageReplica.director_id == director_id)
    ).all()
    return ReplicaState.CORRUPT.value in states


def _must_compare_contents(db: Database, image: str, director_name: str) -> bool:
    """Was this director's copy of the image last found corrupt? (Then --checksum.)"""
    with db.session() as session:
        director = find(session, director_name)
        if director is None:
            raise NotFoundError(f"no director named {director_name!r}")
        return _found_corrupt(session, image, director.id)


def _begin(db: Database, revision: Revision, director_name: str, started: datetime) -> None:
    """Mark the replica `syncing`."""
    with db.session() as session:
        director = find(session, director_name)
        assert director is not None  # _must_compare_contents found it
        row = _replica_row(session, revision.image_id, director.id)
        row.state = ReplicaState.SYNCING.value
        row.started_at = started
        row.updated_at = datetime.now(UTC)
        row.error = ""


def _finish(
    db: Database,
    revision: Revision,
    director_name: str,
    result: ReplicaResult,
    checksum: str | None,
) -> None:
    with db.session() as session:
        director = find(session, director_name)
        assert director is not None  # _begin found it
        row = _replica_row(session, revision.image_id, director.id)
        now = datetime.now(UTC)
        row.state = result.state.value
        row.bytes_sent = result.bytes_sent
        row.files_sent = result.files_sent
        row.sync_seconds = result.sync_seconds
        row.verify_seconds = result.verify_seconds if result.verify_seconds else None
        row.checksum = checksum
        row.error = result.error
        row.updated_at = now
        if result.state is ReplicaState.VERIFIED:
            row.verified_at = now
            # a corrupt copy of an older revision is history now: this one is whole
            for old in session.scalars(
                select(ImageReplica)
                .join(Image, Image.id == ImageReplica.image_id)
                .where(
                    Image.name == revision.name,
                    ImageReplica.director_id == director.id,
                    ImageReplica.state == ReplicaState.CORRUPT.value,
                )
            ):
                old.state = ReplicaState.PENDING.value
                old.error = f"superseded by verified {revision.version}"


def verify(revision: Revision, target: SyncTarget, options: rsync.RsyncOptions) -> Verification:
    """Is the director's copy the revision's manifest? (See the module docstring.)"""
    start = time.monotonic()
    manifest = read_manifest(revision.manifest_path)
    dest = target.image_dest(revision.name)
    if not target.is_daemon:
        found = scan_tree(Path(dest), None, exclude=frozenset({rsync.PARTIAL_DIR}))
        differing = differences(manifest, found)
        moved = bool(differing) and not _tree_is(manifest, revision.source_path)
        return Verification(
            ok=not differing,
            checksum=found.tree_hash,
            differing=tuple(differing),
            seconds=time.monotonic() - start,
            tree_moved=moved,
        )
    if not _tree_is(manifest, revision.source_path):
        return Verification(False, None, (), time.monotonic() - start, tree_moved=True)
    paths = rsync.checksum_differences(revision.source_path, dest, options)
    return Verification(
        ok=not paths,
        checksum=None if paths else manifest.tree_hash,
        differing=tuple(paths[:5]),
        seconds=time.monotonic() - start,
    )


def _tree_is(manifest: Manifest, tree: Path) -> bool:
    return scan_tree(tree, manifest).tree_hash == manifest.tree_hash


def sync_replica(
    db: Database,
    image: LoadedImage,
    revision: Revision | Future[Revision],
    target: SyncTarget,
    options: rsync.RsyncOptions,
    *,
    force_checksum: bool = False,
    on_progress: ProgressCallback | None = None,
) -> ReplicaResult:
    """Send the image's tree to one director, verify the copy against the revision's
    manifest, record the outcome. `revision` may still be being computed (a Future): the
    transfer starts at once and the revision check runs alongside it."""
    checksum_sync = force_checksum or _must_compare_contents(db, image.name, target.director)
    dest = target.image_dest(image.name)

    def report(done: int, percent: int) -> None:
        if on_progress is not None:
            on_progress(ProgressUpdate(image.name, target.director, done, percent))

    if not target.is_daemon:
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
    started_at, started = datetime.now(UTC), time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool:
        sending = pool.submit(
            rsync.transfer,
            image.definition.tree,
            dest,
            options,
            checksum=checksum_sync,
            on_progress=report if on_progress is not None else None,
        )
        try:
            known = revision if isinstance(revision, Revision) else revision.result()
        finally:
            wait([sending])
    _begin(db, known, target.director, started_at)
    base = ReplicaResult(
        image.name,
        known.version,
        target.director,
        ReplicaState.FAILED,
        tree_bytes=known.size_bytes,
        checksum_sync=checksum_sync,
    )
    try:
        stats = sending.result()
    except (rsync.RsyncFailed, OSError) as exc:
        failed = _with(base, sync_seconds=time.monotonic() - started, error=str(exc))
        _finish(db, known, target.director, failed, None)
        return failed
    synced = _with(
        base,
        bytes_sent=stats.bytes_sent,
        files_sent=stats.files_sent,
        sync_seconds=stats.seconds,
    )
    try:
        check = verify(known, target, options)
    except (rsync.RsyncFailed, OSError) as exc:
        failed = _with(synced, error=f"verification failed: {exc}")
        _finish(db, known, target.director, failed, None)
        return failed
    if check.ok:
        state, error = ReplicaState.VERIFIED, ""
    elif check.tree_moved:
        state = ReplicaState.PENDING
        error = "the head's tree changed during the sync: the next sync sends a new revision"
    else:
        state = ReplicaState.CORRUPT
        error = (
            f"copy differs from manifest {known.version} at {', '.join(check.differing)}: "
            "the next sync repairs it (--checksum)"
        )
    done = _with(synced, state=state, verify_seconds=check.seconds, error=error)
    _finish(db, known, target.director, done, check.checksum)
    return done


def _with(result: ReplicaResult, **changes: object) -> ReplicaResult:
    return replace(result, **changes)  # type: ignore[arg-type]


def _directors(session: Session, settings: Settings, named: str | None) -> list[Director]:
    if named is not None:
        director = find(session, named)
        if director is None:
            raise NotFoundError(f"no director named {named!r} (see `clustermgr directors list`)")
        return [director]
    rows = session.scalars(select(Director).order_by(Director.name)).all()
    synced = {state.value for state in SYNCED_STATES}  # an unknown state is not synced to
    return [d for d in rows if d.state in synced]


def sync_all(
    db: Database,
    settings: Settings,
    *,
    image: str | None = None,
    director: str | None = None,
    force_checksum: bool = False,
    on_progress: ProgressCallback | None = None,
    machine_images: bool = True,
) -> SyncReport:
    """The scheduled job (and `clustermgr images sync`): record a revision of each image
    whose tree changed, sync it to every serving director (or `director`), verify each
    copy, and copy the AWS base images into the regions in use."""
    report = SyncReport()
    loaded = _selected(settings, image)
    options = options_of(settings.images)
    with db.session() as session:
        targets: list[SyncTarget] = []
        for row in _directors(session, settings, director):
            target = target_for(settings.images, row)
            if target is None:
                report.errors.append(f"director {row.name}: no address yet; not synced")
            else:
                targets.append(target)
    if any(target.is_daemon for target in targets):
        try:
            options = replace(options, password=push_auth.credentials(settings))
        except ConfigError as exc:
            report.errors.append(f"{exc}; no director's daemon synced")
            targets = [target for target in targets if not target.is_daemon]
    with ThreadPoolExecutor(max_workers=1) as scanner:
        for one in loaded:
            # the revision check (a scan of the tree) runs alongside the first transfer
            pending = scanner.submit(_record, db, one, settings.daemon.state_dir)
            for target in targets:
                try:
                    report.replicas.append(
                        sync_replica(
                            db,
                            one,
                            pending,
                            target,
                            options,
                            force_checksum=force_checksum,
                            on_progress=on_progress,
                        )
                    )
                except (ClusterMgrError, OSError):
                    if pending.exception() is None:
                        raise
                    break  # the revision failed: reported once below
            try:
                report.revisions.append(pending.result())
            except (ClusterMgrError, OSError) as exc:
                report.errors.append(f"image {one.name}: {exc}")
                continue
            if machine_images:
                try:
                    report.machine_images.extend(copy_base_images(db, settings, one))
                except ClusterMgrError as exc:
                    report.errors.append(f"image {one.name}: machine images: {exc}")
    return report


def _record(db: Database, image: LoadedImage, state_dir: Path) -> Revision:
    with db.session() as session:
        return record_revision(session, image.name, image.definition.tree, state_dir)


def _selected(settings: Settings, image: str | None) -> Sequence[LoadedImage]:
    loaded = load_images(images_dir(settings))
    if image is None:
        return loaded
    chosen = [one for one in loaded if one.name == image]
    if not chosen:
        known = ", ".join(one.name for one in loaded) or "none"
        raise NotFoundError(f"no image named {image!r} (known: {known})")
    return chosen

"""Manifests of software image trees, and the image revisions they define.

A manifest lists every entry of a tree by relative path: kind (file, dir, symlink), mode,
size and sha256 of each regular file, a symlink's target, and for a hard link the first
path (in sorted order) of the same inode. The tree hash is the sha256 of those entries,
sorted; ownership and times are left out (a director may not share the head's uids).
A revision is one tree hash: a new `Image` row and manifest file only when the tree changed.

Re-scanning reuses the previous manifest's sha256 for a file whose (device, inode, size,
mtime, ctime) are unchanged, as git's index does, so a revision check of a large tree
hashes only what changed. Verifying a director's copy never takes that shortcut.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clustermgr.core.errors import ConfigError
from clustermgr.db.models import Image

FORMAT = 1
HASH_WORKERS = min(8, os.cpu_count() or 1)
PARTIAL_DIR = ".rsync-partial"  # rsync's resume area on a director: never image content

Kind = Literal["file", "dir", "symlink"]


@dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative, '/'-separated
    kind: Kind
    mode: int  # permission bits (0 for a symlink)
    size: int = 0
    sha256: str = ""
    target: str = ""  # a symlink's target
    link: str = ""  # a hard link: the first path of the same inode
    stat: str = ""  # the scan cache key (not part of the tree hash)

    def identity(self) -> str:
        """This entry's line in the tree hash."""
        if self.kind == "file" and self.link:
            return f"hardlink\0{self.path}\0{self.link}\n"
        return (
            f"{self.kind}\0{self.path}\0{self.mode:o}\0{self.size}\0{self.sha256}\0{self.target}\n"
        )


@dataclass(frozen=True)
class Manifest:
    entries: tuple[ManifestEntry, ...]
    tree_hash: str

    @property
    def size_bytes(self) -> int:
        return sum(e.size for e in self.entries if e.kind == "file" and not e.link)

    @property
    def file_count(self) -> int:
        return sum(1 for e in self.entries if e.kind == "file")


@dataclass(frozen=True)
class Revision:
    """One recorded revision of an image tree (an `Image` row and its manifest file)."""

    image_id: int
    name: str
    version: str
    tree_hash: str
    manifest_path: Path
    source_path: Path
    size_bytes: int
    file_count: int
    created: bool  # a new revision (the tree changed) rather than the latest one again


def tree_hash(entries: Iterable[ManifestEntry]) -> str:
    digest = hashlib.sha256()
    for entry in sorted(entries, key=lambda e: e.path):
        digest.update(entry.identity().encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _walk(root: Path, exclude: frozenset[str]) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of everything under root, depth first in sorted order."""
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as found:
            children = sorted(found, key=lambda d: d.name, reverse=True)
        for child in children:
            if child.name in exclude:
                continue
            path = f"{rel}/{child.name}" if rel else child.name
            info = child.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)
            yield path, info


def _hash_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def scan_tree(
    root: Path,
    previous: Manifest | None = None,
    *,
    exclude: frozenset[str] = frozenset(),
    workers: int = HASH_WORKERS,
) -> Manifest:
    """The manifest of `root`. With `previous`, files whose stat is unchanged keep their
    sha256 unread; without it (verification) every file is read."""
    cached = {e.path: e for e in previous.entries} if previous else {}
    first_of_inode: dict[tuple[int, int], str] = {}
    entries: list[ManifestEntry] = []
    to_hash: list[int] = []
    for rel, info in sorted(_walk(root, exclude), key=lambda item: item[0]):
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            entries.append(ManifestEntry(rel, "dir", mode))
        elif stat.S_ISLNK(info.st_mode):
            entries.append(ManifestEntry(rel, "symlink", 0, target=os.readlink(root / rel)))
        elif stat.S_ISREG(info.st_mode):
            key = (info.st_dev, info.st_ino)
            link = first_of_inode.setdefault(key, rel) if info.st_nlink > 1 else rel
            stat_key = (
                f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"
            )
            old = cached.get(rel)
            sha = old.sha256 if old and old.stat == stat_key and old.kind == "file" else ""
            entry = ManifestEntry(
                rel,
                "file",
                mode,
                info.st_size,
                sha,
                link="" if link == rel else link,
                stat=stat_key,
            )
            if not sha and not entry.link:
                to_hash.append(len(entries))
            entries.append(entry)
        # sockets, fifos and devices are not image content: left out
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        digests = pool.map(_hash_file, (root / entries[i].path for i in to_hash))
        for index, digest in zip(to_hash, digests, strict=True):
            entries[index] = replace(entries[index], sha256=digest)
    # a hard link carries its first path's content
    by_path = {e.path: e for e in entries}
    entries = [
        replace(e, size=by_path[e.link].size, sha256=by_path[e.link].sha256) if e.link else e
        for e in entries
    ]
    return Manifest(tuple(entries), tree_hash(entries))


def differences(expected: Manifest, found: Manifest, limit: int = 5) -> list[str]:
    """Paths where `found` differs from `expected` (missing, extra, changed), sorted."""
    want = {e.path: e.identity() for e in expected.entries}
    have = {e.path: e.identity() for e in found.entries}
    paths = sorted(p for p in want.keys() | have.keys() if want.get(p) != have.get(p))
    return paths[:limit] if limit else paths


def write_manifest(manifest: Manifest, path: Path, name: str, version: str) -> None:
    """Atomically (a temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "image": name,
        "version": version,
        "tree_hash": manifest.tree_hash,
        "written_at": datetime.now(UTC).isoformat(),
        "entries": [asdict(e) for e in manifest.entries],
    }
    scratch = path.with_name(f".{path.name}.tmp")
    scratch.write_text(json.dumps(payload, separators=(",", ":")), encoding="utf-8")
    os.replace(scratch, path)


def read_manifest(path: Path) -> Manifest:
    payload = json.loads(path.read_text(encoding="utf-8"))
    entries = tuple(ManifestEntry(**raw) for raw in payload["entries"])
    return Manifest(entries, str(payload["tree_hash"]))


def revisions_dir(state_dir: Path, image: str) -> Path:
    """Where an image's manifests live: <state_dir>/images/<name>/<version>.json."""
    return state_dir / "images" / image


def latest_image_row(session: Session, name: str) -> Image | None:
    return session.scalars(
        select(Image).filter_by(name=name).order_by(Image.id.desc()).limit(1)
    ).one_or_none()


def _as_revision(row: Image, created: bool) -> Revision:
    return Revision(
        image_id=row.id,
        name=row.name,
        version=row.version,
        tree_hash=row.checksum,
        manifest_path=Path(row.manifest_path),
        source_path=Path(row.source_path),
        size_bytes=row.size_bytes,
        file_count=row.file_count,
        created=created,
    )


def revision_of(row: Image) -> Revision:
    return _as_revision(row, created=False)


def record_revision(session: Session, name: str, tree: Path, state_dir: Path) -> Revision:
    """The image's current revision: the latest one when the tree is unchanged, else a new
    one (manifest written, `Image` row added to `session`)."""
    if not tree.is_dir():
        raise ConfigError(f"image {name}: tree {tree} is not a directory on this head node")
    latest = latest_image_row(session, name)
    previous = None
    if latest is not None and Path(latest.manifest_path).exists():
        previous = read_manifest(Path(latest.manifest_path))
    manifest = scan_tree(tree, previous)
    if latest is not None and previous is not None and latest.checksum == manifest.tree_hash:
        if [e.stat for e in previous.entries] != [e.stat for e in manifest.entries]:
            # same content, new stat: keep the cache warm for the next check
            write_manifest(manifest, Path(latest.manifest_path), name, latest.version)
        return _as_revision(latest, created=False)
    count = session.scalar(select(func.count()).select_from(Image).filter_by(name=name)) or 0
    version = f"r{count + 1}-{manifest.tree_hash[:12]}"
    manifest_path = revisions_dir(state_dir, name) / f"{version}.json"
    write_manifest(manifest, manifest_path, name, version)
    row = Image(
        name=name,
        version=version,
        checksum=manifest.tree_hash,
        size_bytes=manifest.size_bytes,
        file_count=manifest.file_count,
        source_path=str(tree),
        manifest_path=str(manifest_path),
        created_at=datetime.now(UTC),
    )
    session.add(row)
    session.flush()
    return _as_revision(row, created=True)

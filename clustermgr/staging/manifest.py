"""A staging manifest: size, mtime and sha256 of every file a transfer moved and verified,
kept in the staging area as `.cmsub/in.json` / `.cmsub/out.json`. A re-run trusts an
entry whose file still has the same size, mtime and sha256, so it is not verified again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

FORMAT = 1
HASH_WORKERS = min(8, os.cpu_count() or 1)


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the staging area, '/'-separated
    size: int
    mtime_ns: int
    sha256: str

    def same_file(self, other: FileEntry) -> bool:
        return (self.size, self.mtime_ns, self.sha256) == (
            other.size,
            other.mtime_ns,
            other.sha256,
        )


def sha256_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _hash_batch(paths: list[Path]) -> list[str]:
    return [sha256_of(path) for path in paths]


def hash_files(paths: list[Path], workers: int = HASH_WORKERS) -> list[str]:
    """sha256 of each path, in order: one batch per thread (a future per small file costs
    more than hashing it)."""
    count = max(1, min(workers, len(paths)))
    batches = [paths[i::count] for i in range(count)]
    with ThreadPoolExecutor(max_workers=count) as pool:
        done = list(pool.map(_hash_batch, batches))
    found = [""] * len(paths)
    for index, digests in enumerate(done):
        found[index::count] = digests
    return found


def encode(entries: Iterable[FileEntry], direction: str) -> bytes:
    payload = {
        "format": FORMAT,
        "direction": direction,
        "files": [
            {"path": e.path, "size": e.size, "mtime_ns": e.mtime_ns, "sha256": e.sha256}
            for e in sorted(entries, key=lambda e: e.path)
        ],
    }
    return json.dumps(payload, separators=(",", ":")).encode("utf-8", "surrogateescape")


def decode(raw: bytes) -> dict[str, FileEntry]:
    """The entries of a manifest by path; {} for something that is not one."""
    try:
        payload = json.loads(raw.decode("utf-8", "surrogateescape"))
        files = payload["files"] if payload.get("format") == FORMAT else []
        entries = [FileEntry(**raw_entry) for raw_entry in files]
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
    return {e.path: e for e in entries}

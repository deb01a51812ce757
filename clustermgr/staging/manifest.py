"""A staging manifest: every file a transfer moved and verified, kept in the staging area
as `.cmsub/in.json` / `.cmsub/out.json`: its path, size, mtime and ctime on the local side
(the source of a stage-in, the destination of a stage-out) and the digest its content was
verified with, by the algorithm the manifest names:

- `xxh128` (rsync): the whole-file checksum rsync checked the receiver's copy against, or
  the one both sides' content had in rsync's `--checksum` comparison;
- `sha256` (s3): the file's sha256, which S3 checked on receipt.

A re-run trusts an entry (neither sends nor compares the file again) when the local file is
still the one that was verified: for rsync, the same size, mtime and ctime (a write to the
file, or setting its mtime back afterwards, changes its ctime); for s3, the same size,
mtime and sha256. A manifest of another algorithm or format is not trusted: its files are
compared again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

FORMAT = 2
XXH128 = "xxh128"
SHA256 = "sha256"


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the staging area, '/'-separated
    size: int
    mtime_ns: int
    digest: str  # of the content, by the manifest's algorithm
    ctime_ns: int = 0  # the local side's change time; 0: not recorded (never trusted)

    def unchanged(self, now: FileEntry) -> bool:
        """rsync: `now` (the local file as it is) is still the file this entry verified."""
        return self.ctime_ns != 0 and (self.size, self.mtime_ns, self.ctime_ns) == (
            now.size,
            now.mtime_ns,
            now.ctime_ns,
        )

    def same_content(self, now: FileEntry) -> bool:
        """s3: the same size, mtime and digest."""
        return (self.size, self.mtime_ns, self.digest) == (now.size, now.mtime_ns, now.digest)


@dataclass(frozen=True)
class Previous:
    """A manifest read back: its entries by path, or why none is trusted."""

    entries: dict[str, FileEntry]
    refused: str = ""


def sha256_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def encode(entries: Iterable[FileEntry], direction: str, algo: str) -> bytes:
    """One list per file ([path, size, mtime_ns, ctime_ns, digest]): 10,000 files encode
    in a third of the time dictionaries take."""
    payload = {
        "format": FORMAT,
        "direction": direction,
        "algo": algo,
        "fields": ["path", "size", "mtime_ns", "ctime_ns", "digest"],
        "files": [
            [e.path, e.size, e.mtime_ns, e.ctime_ns, e.digest]
            for e in sorted(entries, key=lambda e: e.path)
        ],
    }
    return json.dumps(payload, separators=(",", ":")).encode("utf-8", "surrogateescape")


def decode(raw: bytes, algo: str) -> Previous:
    """The entries of a manifest whose digests are `algo`'s; none (with the reason) for
    one of another algorithm, an unknown format, or something that is not a manifest.
    A format-1 manifest (sha256 digests, no ctime) is read as an `sha256` one."""
    try:
        payload = json.loads(raw.decode("utf-8", "surrogateescape"))
        version = payload.get("format")
        if version == 1:
            found, entries = SHA256, [_v1(item) for item in payload["files"]]
        elif version == FORMAT:
            found, entries = str(payload["algo"]), [_v2(item) for item in payload["files"]]
        else:
            return Previous({}, f"format {version!r} is not one this cmsub reads")
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return Previous({}, "it is not a manifest")
    if found != algo:
        return Previous({}, f"its digests are {found}, this transport's are {algo}")
    return Previous({e.path: e for e in entries})


def _v1(item: dict[str, object]) -> FileEntry:
    return FileEntry(
        _text(item["path"]), _int(item["size"]), _int(item["mtime_ns"]), _text(item["sha256"])
    )


def _v2(item: list[object]) -> FileEntry:
    path, size, mtime_ns, ctime_ns, digest = item
    return FileEntry(_text(path), _int(size), _int(mtime_ns), _text(digest), _int(ctime_ns))


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("a manifest field is not text")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("a manifest field is not a number")
    return value

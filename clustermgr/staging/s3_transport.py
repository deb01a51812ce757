"""The s3 transport: the region provider's object storage (a capability it offers,
clustermgr.providers.capabilities: multipart, parallel parts) to a per-job prefix of the
region's bucket, `s3://BUCKET/PREFIX/USER/STAGE_ID/DEST`. No cloud SDK is imported here.

Stage-in uploads each file with `ChecksumAlgorithm=SHA256` (S3 checks every part against
the checksum the client computed: the verification happens at the destination) and its
sha256 in the object's metadata; the object's size and that sha256 are read back before
it counts as verified. Stage-out downloads, hashes what it wrote, and compares with the
object's sha256 metadata (or its single-part ETag, an MD5) when it has one. The
manifest (`.cmsub/in.json` under the prefix) lets a re-run skip verified files.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from clustermgr.config import ProviderSettings, Settings, StagingRegionSettings, StagingSettings
from clustermgr.core.errors import ProviderError, StagingError
from clustermgr.providers import capabilities
from clustermgr.providers.capabilities import BucketAt, ObjectBucket, ObjectCredentials
from clustermgr.staging import manifest
from clustermgr.staging.checks import META_DIR, StageIn, StageOut, area_path
from clustermgr.staging.manifest import FileEntry
from clustermgr.staging.progress import Progress
from clustermgr.staging.rsync_transport import Report

MB = 1024 * 1024
MULTIPART_FROM = 5 * MB  # the smallest part size: below it, one part


@dataclass(frozen=True)
class S3Area:
    bucket: str
    prefix: str  # ends in '/'

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def area_of(region: StagingRegionSettings, user: str, stage_id: str) -> S3Area:
    if not region.s3_bucket:
        raise StagingError(f"staging region {region.provider}: no s3_bucket for --transport s3")
    base = region.s3_prefix.strip("/")
    return S3Area(region.s3_bucket, f"{base + '/' if base else ''}{user}/{stage_id}/")


def parse_area(url: str) -> S3Area:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return S3Area(bucket, prefix.rstrip("/") + "/")


def open_bucket(
    provider: ProviderSettings,
    area: S3Area,
    staging: StagingSettings,
    endpoint_url: str | None = None,
    credentials: ObjectCredentials | None = None,
) -> ObjectBucket:
    """The area's bucket through the provider's object storage (its own credentials unless
    `credentials` are given); ConfigError when its type offers none."""
    store = capabilities.object_storage(provider)
    at = BucketAt(area.bucket, endpoint_url, staging.s3_part_size_mb * MB, staging.s3_workers)
    return store.bucket(at, credentials)


def bucket_with(settings: Settings, access: dict[str, Any], area: S3Area) -> ObjectBucket:
    """The area's bucket through the temporary credentials the staging service minted for
    this user (clustermgr.staging.s3_access): the only S3 access a user's transfer job has."""
    provider = access.get("provider")
    if not isinstance(provider, str):
        raise StagingError(f"{area.url}: the staging service named no provider for its S3 access")
    credentials = ObjectCredentials(
        str(access["access_key_id"]), str(access["secret_access_key"]), str(access["session_token"])
    )
    endpoint = access.get("endpoint_url") or None
    return open_bucket(settings.provider(provider), area, settings.staging, endpoint, credentials)


def _files_in(item: StageIn) -> list[tuple[str, Path]]:
    if not item.is_dir:
        return [(item.dest, item.source)]
    found = []
    for root, _dirs, names in os.walk(item.source):
        for name in names:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink():
                found.append((f"{item.dest}/{path.relative_to(item.source).as_posix()}", path))
    return sorted(found)


def read_manifest(bucket: ObjectBucket, area: S3Area, direction: str) -> dict[str, FileEntry]:
    try:
        body = bucket.get_bytes(f"{area.prefix}{META_DIR}/{direction}.json")
    except ProviderError:  # a missing or unreadable manifest: verify everything
        return {}
    return manifest.decode(body, manifest.SHA256).entries


def write_manifest(
    bucket: ObjectBucket, area: S3Area, direction: str, entries: list[FileEntry]
) -> None:
    body = manifest.encode(entries, direction, manifest.SHA256)
    bucket.put_bytes(f"{area.prefix}{META_DIR}/{direction}.json", body)


def stage_in(
    bucket: ObjectBucket, items: list[StageIn], area: S3Area, progress: Progress
) -> tuple[list[FileEntry], Report]:
    start = time.monotonic()
    previous = read_manifest(bucket, area, "in")
    entries: list[FileEntry] = []
    sent = bytes_sent = compared = 0
    for item in items:
        for rel, path in _files_in(item):
            info = path.stat()
            entry = FileEntry(rel, info.st_size, info.st_mtime_ns, manifest.sha256_of(path))
            key = area.prefix + rel
            old = previous.get(rel)
            if old is None or not old.same_content(entry):
                bucket.put_file(path, key, entry.digest, progress.advance)
                sent += 1
                bytes_sent += entry.size
                compared += 1
                _check_uploaded(bucket, area, key, entry)
            entries.append(entry)
    write_manifest(bucket, area, "in", entries)
    return entries, Report(
        sum(e.size for e in entries),
        len(entries),
        sent,
        bytes_sent,
        compared,
        0,
        time.monotonic() - start,
    )


def _check_uploaded(bucket: ObjectBucket, area: S3Area, key: str, entry: FileEntry) -> None:
    """S3 checked each part against the client's SHA256 on receipt; the object's size, its
    sha256 metadata and (for a single-part object) S3's own SHA256 must be the file's."""
    head = bucket.head(key)
    whole = base64.b64encode(bytes.fromhex(entry.digest)).decode()
    if (
        head.size != entry.size
        or head.sha256 != entry.digest
        or not head.checksum
        or (entry.size < MULTIPART_FROM and head.checksum != whole)
    ):
        raise StagingError(f"s3://{area.bucket}/{key}: differs from {entry.path!r} after upload")


def _md5(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "md5").hexdigest()


def stage_out(
    bucket: ObjectBucket, items: list[StageOut], area: S3Area, progress: Progress
) -> tuple[list[FileEntry], Report]:
    start = time.monotonic()
    entries: list[FileEntry] = []
    bytes_sent = 0
    for item in items:
        base = area.prefix + item.source
        keys = [k for k in bucket.keys(base) if k == base or k.startswith(base + "/")]
        if not keys:
            raise StagingError(f"{area.url}{item.source}: nothing to stage out")
        for key in keys:
            rel = key[len(area.prefix) :]
            tail = key[len(base) :].lstrip("/")
            if tail:
                area_path(tail, f"s3://{area.bucket}/{key}")  # no '..' from an object name
            # DEST is a directory: a prefix's objects under it, a single one by its name
            target = item.dest / (tail or PurePosixPath(item.source).name)
            target.parent.mkdir(parents=True, exist_ok=True)
            bucket.get_file(key, target, progress.advance)
            head = bucket.head(key)
            sha = manifest.sha256_of(target)
            etag = head.etag
            if (head.sha256 and head.sha256 != sha) or (
                not head.sha256 and "-" not in etag and etag and etag != _md5(target)
            ):
                raise StagingError(f"{target}: differs from s3://{area.bucket}/{key}")
            info = target.stat()
            entries.append(FileEntry(rel, info.st_size, info.st_mtime_ns, sha))
            bytes_sent += info.st_size
    write_manifest(bucket, area, "out", entries)
    total = sum(e.size for e in entries)
    return entries, Report(
        total, len(entries), len(entries), bytes_sent, len(entries), 0, time.monotonic() - start
    )


def remove_area(bucket: ObjectBucket, area: S3Area) -> None:
    bucket.delete(bucket.keys(area.prefix))

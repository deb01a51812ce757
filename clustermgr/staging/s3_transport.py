"""The s3 transport: boto3's transfer manager (multipart, parallel parts) to a per-job
prefix of the region's bucket, `s3://BUCKET/PREFIX/USER/STAGE_ID/DEST`.

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
from pathlib import Path
from typing import Any

from clustermgr.config import ProviderSettings, StagingRegionSettings, StagingSettings
from clustermgr.errors import StagingError
from clustermgr.providers import capabilities
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


def client(provider: ProviderSettings, region: StagingRegionSettings, workers: int) -> Any:
    """An S3 client with the provider's own credentials and region (its object storage)."""
    store = capabilities.object_storage(provider)
    return store.object_client(region.s3_endpoint_url, workers)


def client_with(access: dict[str, Any], workers: int) -> Any:
    """An S3 client from the temporary credentials the staging service minted for this
    user (clustermgr.staging.s3_access): the only S3 access a user's transfer job has."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3",
        aws_access_key_id=str(access["access_key_id"]),
        aws_secret_access_key=str(access["secret_access_key"]),
        aws_session_token=str(access["session_token"]),
        endpoint_url=access.get("endpoint_url") or None,
        config=Config(
            region_name=str(access["region"]),
            retries={"mode": "standard", "max_attempts": 5},
            max_pool_connections=workers + 4,
        ),
    )


def _transfer_config(staging: StagingSettings) -> Any:
    from boto3.s3.transfer import TransferConfig

    part = staging.s3_part_size_mb * MB
    return TransferConfig(
        multipart_threshold=part, multipart_chunksize=part, max_concurrency=staging.s3_workers
    )


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


def read_manifest(s3: Any, area: S3Area, direction: str) -> dict[str, FileEntry]:
    try:
        body = s3.get_object(Bucket=area.bucket, Key=f"{area.prefix}{META_DIR}/{direction}.json")
    except Exception:  # a missing or unreadable manifest: verify everything
        return {}
    return manifest.decode(body["Body"].read(), manifest.SHA256).entries


def write_manifest(s3: Any, area: S3Area, direction: str, entries: list[FileEntry]) -> None:
    s3.put_object(
        Bucket=area.bucket,
        Key=f"{area.prefix}{META_DIR}/{direction}.json",
        Body=manifest.encode(entries, direction, manifest.SHA256),
    )


def stage_in(
    s3: Any, staging: StagingSettings, items: list[StageIn], area: S3Area, progress: Progress
) -> tuple[list[FileEntry], Report]:
    start = time.monotonic()
    previous = read_manifest(s3, area, "in")
    config = _transfer_config(staging)
    entries: list[FileEntry] = []
    sent = bytes_sent = compared = 0
    for item in items:
        for rel, path in _files_in(item):
            info = path.stat()
            entry = FileEntry(rel, info.st_size, info.st_mtime_ns, manifest.sha256_of(path))
            key = area.prefix + rel
            old = previous.get(rel)
            if old is None or not old.same_content(entry):
                s3.upload_file(
                    str(path),
                    area.bucket,
                    key,
                    ExtraArgs={"Metadata": {"sha256": entry.digest}, "ChecksumAlgorithm": "SHA256"},
                    Config=config,
                    Callback=progress.advance,
                )
                sent += 1
                bytes_sent += entry.size
                compared += 1
                _check_uploaded(s3, area.bucket, key, entry)
            entries.append(entry)
    write_manifest(s3, area, "in", entries)
    return entries, Report(
        sum(e.size for e in entries),
        len(entries),
        sent,
        bytes_sent,
        compared,
        0,
        time.monotonic() - start,
    )


def _check_uploaded(s3: Any, bucket: str, key: str, entry: FileEntry) -> None:
    """S3 checked each part against the client's SHA256 on receipt; the object's size, its
    sha256 metadata and (for a single-part object) S3's own SHA256 must be the file's."""
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    stored = str(head.get("ChecksumSHA256") or "")
    whole = base64.b64encode(bytes.fromhex(entry.digest)).decode()
    if (
        head["ContentLength"] != entry.size
        or head.get("Metadata", {}).get("sha256") != entry.digest
        or not stored
        or (entry.size < MULTIPART_FROM and stored != whole)
    ):
        raise StagingError(f"s3://{bucket}/{key}: differs from {entry.path!r} after upload")


def _md5(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "md5").hexdigest()


def stage_out(
    s3: Any, staging: StagingSettings, items: list[StageOut], area: S3Area, progress: Progress
) -> tuple[list[FileEntry], Report]:
    start = time.monotonic()
    config = _transfer_config(staging)
    entries: list[FileEntry] = []
    bytes_sent = 0
    paginator = s3.get_paginator("list_objects_v2")
    for item in items:
        base = area.prefix + item.source
        keys = [
            obj["Key"]
            for page in paginator.paginate(Bucket=area.bucket, Prefix=base)
            for obj in page.get("Contents", [])
            if obj["Key"] == base or obj["Key"].startswith(base + "/")
        ]
        if not keys:
            raise StagingError(f"{area.url}{item.source}: nothing to stage out")
        for key in keys:
            rel = key[len(area.prefix) :]
            tail = key[len(base) :].lstrip("/")
            if tail:
                area_path(tail, f"s3://{area.bucket}/{key}")  # no '..' from an object name
            target = item.dest / tail if tail else item.dest
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(
                area.bucket, key, str(target), Config=config, Callback=progress.advance
            )
            head = s3.head_object(Bucket=area.bucket, Key=key)
            sha = manifest.sha256_of(target)
            want = head.get("Metadata", {}).get("sha256")
            etag = str(head.get("ETag", "")).strip('"')
            if (want and want != sha) or (
                not want and "-" not in etag and etag and etag != _md5(target)
            ):
                raise StagingError(f"{target}: differs from s3://{area.bucket}/{key}")
            info = target.stat()
            entries.append(FileEntry(rel, info.st_size, info.st_mtime_ns, sha))
            bytes_sent += info.st_size
    write_manifest(s3, area, "out", entries)
    total = sum(e.size for e in entries)
    return entries, Report(
        total, len(entries), len(entries), bytes_sent, len(entries), 0, time.monotonic() - start
    )


def remove_area(s3: Any, area: S3Area) -> None:
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=area.bucket, Prefix=area.prefix):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=area.bucket, Delete={"Objects": keys})

"""The s3 transport against the moto server fake: multipart uploads with SHA256 checks,
hostile names as object keys, the manifest and a re-run that uploads nothing, stage-out
with verification, the area removed, all through the provider's object storage (the
ObjectStorage capability: staging imports no cloud SDK); a presigned URL. (No newline in a
name here: moto answers 404 for a key that holds one; the rsync tests cover newlines.)"""

from __future__ import annotations

import base64
import hashlib
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from clustermgr.config import ProviderSettings, StagingRegionSettings, StagingSettings
from clustermgr.core.errors import ProviderError, StagingError
from clustermgr.staging import s3_transport
from clustermgr.staging.checks import StageIn, StageOut
from clustermgr.staging.progress import Quiet
from tests.fakes.aws_harness import ACCESS_KEY, SECRET_KEY

REGION = "us-east-1"
BUCKET = "cmsub-staging"


@dataclass(frozen=True)
class Store:
    """The moto server's S3: a boto3 client of the test's own (to look behind the
    transport's back) and the provider whose object storage the transport goes through."""

    client: Any
    provider: ProviderSettings


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # moto's own server: FakeAws's EC2 fault middleware does not pass S3's aws-chunked
    # upload bodies through (objects arrive empty)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        provider = ProviderSettings(name="aws-east", type="aws", region=REGION, endpoint_url=url)
        client = boto3.session.Session().client("s3", region_name=REGION, endpoint_url=url)
        client.create_bucket(Bucket=BUCKET)
        yield Store(client, provider)
    finally:
        server.stop()


def test_stage_in_multipart_resume_stage_out_and_cleanup(s3: Store, tmp_path: Path) -> None:
    staging = StagingSettings(s3_part_size_mb=5, s3_workers=4)
    src = tmp_path / "in put"
    (src / "sub").mkdir(parents=True)
    big = os.urandom(12 * 1024 * 1024)  # three parts
    (src / "big.bin").write_bytes(big)
    (src / "sub" / "quo'te $(x);|").write_text("small")
    region = StagingRegionSettings(provider="aws-east", partition="c", s3_bucket=BUCKET)
    area = s3_transport.area_of(region, "alice", "s1")
    assert area.url == f"s3://{BUCKET}/cmsub/alice/s1/"
    bucket = s3_transport.open_bucket(s3.provider, area, staging)

    entries, report = s3_transport.stage_in(bucket, [StageIn(src, "data", True)], area, Quiet())
    assert (report.files_total, report.files_sent) == (2, 2)
    head = s3.client.head_object(Bucket=BUCKET, Key=area.prefix + "data/big.bin")
    assert head["ContentLength"] == len(big)
    assert head["Metadata"]["sha256"] == hashlib.sha256(big).hexdigest()
    assert head["ETag"].strip('"').endswith("-3")  # multipart
    small = s3.client.head_object(
        Bucket=BUCKET, Key=area.prefix + "data/sub/quo'te $(x);|", ChecksumMode="ENABLED"
    )
    assert small["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"small").digest()).decode()
    assert {e.path for e in entries} == {"data/big.bin", "data/sub/quo'te $(x);|"}

    _entries, again = s3_transport.stage_in(bucket, [StageIn(src, "data", True)], area, Quiet())
    assert again.files_sent == 0  # the manifest says both are verified

    s3.client.put_object(Bucket=BUCKET, Key=area.prefix + "out/result.txt", Body=b"42")
    home = tmp_path / "home"
    home.mkdir()
    _out, back = s3_transport.stage_out(bucket, [StageOut("out", home / "results")], area, Quiet())
    assert (home / "results" / "result.txt").read_bytes() == b"42"
    assert back.files_total == 1

    s3.client.put_object(
        Bucket=BUCKET, Key=area.prefix + "bad/x", Body=b"1", Metadata={"sha256": "0" * 64}
    )
    with pytest.raises(StagingError, match="differs from"):
        s3_transport.stage_out(bucket, [StageOut("bad", home / "bad")], area, Quiet())

    s3_transport.remove_area(bucket, area)
    listed = s3.client.list_objects_v2(Bucket=BUCKET, Prefix=area.prefix)
    assert listed.get("KeyCount", 0) == 0


def test_a_presigned_url_gets_and_puts_one_object_without_credentials(s3: Store) -> None:
    area = s3_transport.parse_area(f"s3://{BUCKET}/cmsub/bob/s2")
    bucket = s3_transport.open_bucket(s3.provider, area, StagingSettings())
    key = area.prefix + "result.txt"
    put = bucket.presign(key, "put", 300)
    upload = urllib.request.Request(  # noqa: S310
        put, b"from a browser", {"Content-Type": "application/octet-stream"}, method="PUT"
    )
    with urllib.request.urlopen(upload, timeout=30) as answer:  # noqa: S310
        assert answer.status == 200
    assert bucket.get_bytes(key) == b"from a browser"
    with urllib.request.urlopen(bucket.presign(key, "get", 300), timeout=30) as answer:  # noqa: S310
        assert answer.read() == b"from a browser"
    assert "Signature=" in put or "X-Amz-Signature=" in put
    assert SECRET_KEY not in put  # signed with the key, never carrying it


def test_a_missing_object_is_a_provider_error_naming_its_code(s3: Store) -> None:
    area = s3_transport.parse_area(f"s3://{BUCKET}/cmsub/carol/s3")
    bucket = s3_transport.open_bucket(s3.provider, area, StagingSettings())
    with pytest.raises(ProviderError) as caught:
        bucket.get_bytes(area.prefix + "nothing-here")
    assert caught.value.code in ("NoSuchKey", "404") and caught.value.provider == "aws-east"

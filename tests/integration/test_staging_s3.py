"""The s3 transport against the moto server fake: multipart uploads with SHA256 checks,
hostile names as object keys, the manifest and a re-run that uploads nothing, stage-out
with verification, the area removed. (No newline in a name here: moto answers 404 for a key
that holds one; the rsync tests cover newlines.)"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from clustermgr.config import ProviderSettings, StagingRegionSettings, StagingSettings
from clustermgr.errors import StagingError
from clustermgr.staging import s3_transport
from clustermgr.staging.checks import StageIn, StageOut
from clustermgr.staging.progress import Quiet
from tests.fakes.aws_harness import ACCESS_KEY, SECRET_KEY

REGION = "us-east-1"
BUCKET = "cmsub-staging"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
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
        provider = ProviderSettings(
            name="aws-east", type="aws", region=REGION, endpoint_url=f"http://{host}:{port}"
        )
        region = StagingRegionSettings(
            provider="aws-east", partition="cloud", s3_bucket=BUCKET, s3_prefix="jobs"
        )
        client = s3_transport.client(provider, region, workers=4)
        client.create_bucket(Bucket=BUCKET)
        yield client
    finally:
        server.stop()


def test_stage_in_multipart_resume_stage_out_and_cleanup(s3: object, tmp_path: Path) -> None:
    staging = StagingSettings(s3_part_size_mb=5, s3_workers=4)
    src = tmp_path / "in put"
    (src / "sub").mkdir(parents=True)
    big = os.urandom(12 * 1024 * 1024)  # three parts
    (src / "big.bin").write_bytes(big)
    (src / "sub" / "quo'te $(x);|").write_text("small")
    region = StagingRegionSettings(provider="aws-east", partition="c", s3_bucket=BUCKET)
    area = s3_transport.area_of(region, "alice", "s1")
    assert area.url == f"s3://{BUCKET}/cmsub/alice/s1/"

    entries, report = s3_transport.stage_in(
        s3, staging, [StageIn(src, "data", True)], area, Quiet()
    )
    assert (report.files_total, report.files_sent) == (2, 2)
    head = s3.head_object(Bucket=BUCKET, Key=area.prefix + "data/big.bin")  # type: ignore[attr-defined]
    assert head["ContentLength"] == len(big)
    assert head["Metadata"]["sha256"] == hashlib.sha256(big).hexdigest()
    assert head["ETag"].strip('"').endswith("-3")  # multipart
    small = s3.head_object(  # type: ignore[attr-defined]
        Bucket=BUCKET, Key=area.prefix + "data/sub/quo'te $(x);|", ChecksumMode="ENABLED"
    )
    assert small["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"small").digest()).decode()
    assert {e.path for e in entries} == {"data/big.bin", "data/sub/quo'te $(x);|"}

    _entries, again = s3_transport.stage_in(
        s3, staging, [StageIn(src, "data", True)], area, Quiet()
    )
    assert again.files_sent == 0  # the manifest says both are verified

    s3.put_object(Bucket=BUCKET, Key=area.prefix + "out/result.txt", Body=b"42")  # type: ignore[attr-defined]
    home = tmp_path / "home"
    home.mkdir()
    _out, back = s3_transport.stage_out(
        s3, staging, [StageOut("out", home / "results")], area, Quiet()
    )
    assert (home / "results" / "result.txt").read_bytes() == b"42"
    assert back.files_total == 1

    s3.put_object(  # type: ignore[attr-defined]
        Bucket=BUCKET, Key=area.prefix + "bad/x", Body=b"1", Metadata={"sha256": "0" * 64}
    )
    with pytest.raises(StagingError, match="differs from"):
        s3_transport.stage_out(s3, staging, [StageOut("bad", home / "bad")], area, Quiet())

    s3_transport.remove_area(s3, area)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=area.prefix)  # type: ignore[attr-defined]
    assert listed.get("KeyCount", 0) == 0
    assert boto3  # the real SDK, over HTTP to the fake

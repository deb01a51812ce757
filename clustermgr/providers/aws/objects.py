"""S3 for job staging (clustermgr.providers.capabilities.ObjectStorage): buckets reached
with the provider's boto3 session or with temporary credentials, moved by boto3's transfer
manager (multipart, parallel parts, SHA-256 checked by S3 per part), and temporary
credentials scoped by a session policy (sts:AssumeRole with a role, else
sts:GetFederationToken of the provider's IAM user)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from clustermgr.providers.aws.client import MAX_ATTEMPTS, AwsClients
from clustermgr.providers.aws.errors import SDK_ERRORS, provider_error
from clustermgr.providers.capabilities import (
    BucketAt,
    ObjectCredentials,
    Progress,
    StoredObject,
)

T = TypeVar("T")
# the transfer manager's own failures (S3UploadFailedError) besides botocore's
S3_ERRORS: tuple[type[BaseException], ...] = (*SDK_ERRORS, Boto3Error)


class AwsObjectStorage:
    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients

    def bucket(self, at: BucketAt, credentials: ObjectCredentials | None = None) -> AwsBucket:
        settings = self.clients.settings
        if credentials is None:
            session = self.clients.session()
        else:
            session = boto3.session.Session(
                aws_access_key_id=credentials.access_key_id,
                aws_secret_access_key=credentials.secret_access_key,
                aws_session_token=credentials.session_token,
                region_name=settings.region,
            )
        client = session.client(
            "s3",
            endpoint_url=at.endpoint_url or settings.endpoint_url,
            config=Config(
                region_name=settings.region,
                retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
                max_pool_connections=at.workers + 4,
            ),
        )
        return AwsBucket(client, at, settings.name)

    def scoped_credentials(
        self, policy: str, session_name: str, role: str, duration_s: int
    ) -> ObjectCredentials:
        endpoint = self.clients.settings.endpoint_url
        sts = self.clients.session().client("sts", endpoint_url=endpoint)
        try:
            if role:
                answer = sts.assume_role(
                    RoleArn=role,
                    RoleSessionName=session_name,
                    Policy=policy,
                    DurationSeconds=duration_s,
                )
            else:
                answer = sts.get_federation_token(
                    Name=session_name, Policy=policy, DurationSeconds=duration_s
                )
        except SDK_ERRORS as exc:
            raise provider_error(exc, self.clients.name) from None
        credentials = answer["Credentials"]
        return ObjectCredentials(
            credentials["AccessKeyId"], credentials["SecretAccessKey"], credentials["SessionToken"]
        )


class AwsBucket:
    """One S3 bucket (capabilities.ObjectBucket)."""

    def __init__(self, client: Any, at: BucketAt, provider: str) -> None:
        self.client = client
        self.name = at.name
        self.provider = provider
        self.config = TransferConfig(
            multipart_threshold=at.part_size,
            multipart_chunksize=at.part_size,
            max_concurrency=at.workers,
        )

    def _call(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except S3_ERRORS as exc:
            raise provider_error(exc, self.provider) from None

    def put_file(self, path: Path, key: str, sha256: str, progress: Progress) -> None:
        extra = {"Metadata": {"sha256": sha256}, "ChecksumAlgorithm": "SHA256"}
        self._call(
            lambda: self.client.upload_file(
                str(path), self.name, key, ExtraArgs=extra, Config=self.config, Callback=progress
            )
        )

    def get_file(self, key: str, path: Path, progress: Progress) -> None:
        self._call(
            lambda: self.client.download_file(
                self.name, key, str(path), Config=self.config, Callback=progress
            )
        )

    def put_bytes(self, key: str, body: bytes) -> None:
        self._call(lambda: self.client.put_object(Bucket=self.name, Key=key, Body=body))

    def get_bytes(self, key: str) -> bytes:
        answer = self._call(lambda: self.client.get_object(Bucket=self.name, Key=key))
        body: bytes = self._call(answer["Body"].read)
        return body

    def head(self, key: str) -> StoredObject:
        head = self._call(
            lambda: self.client.head_object(Bucket=self.name, Key=key, ChecksumMode="ENABLED")
        )
        return StoredObject(
            size=int(head["ContentLength"]),
            sha256=str(head.get("Metadata", {}).get("sha256") or ""),
            checksum=str(head.get("ChecksumSHA256") or ""),
            etag=str(head.get("ETag", "")).strip('"'),
        )

    def keys(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.name, Prefix=prefix
        )
        return self._call(
            lambda: [obj["Key"] for page in pages for obj in page.get("Contents", [])]
        )

    def delete(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes 1,000 keys a call
            self._delete_batch([{"Key": key} for key in keys[start : start + 1000]])

    def _delete_batch(self, objects: list[dict[str, str]]) -> None:
        self._call(
            lambda: self.client.delete_objects(Bucket=self.name, Delete={"Objects": objects})
        )

    def presign(self, key: str, method: Literal["get", "put"], expires_s: int) -> str:
        operation = "get_object" if method == "get" else "put_object"
        url: str = self._call(
            lambda: self.client.generate_presigned_url(
                operation, Params={"Bucket": self.name, "Key": key}, ExpiresIn=expires_s
            )
        )
        return url

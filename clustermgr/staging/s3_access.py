"""S3 access for one user's transfer: temporary credentials the staging service mints with
the provider's own (which never leave it), limited by a session policy to the user's
prefix of the region's bucket (`s3://BUCKET/PREFIX/USER/`), handed to the user's transfer
job over the authenticated channel. With `[[staging.regions]] s3_role_arn` the service
assumes that role (sts:AssumeRole); otherwise it asks for a federation token
(sts:GetFederationToken, which needs an IAM user's long-term keys)."""

from __future__ import annotations

import json
from typing import Any

from clustermgr.config import ProviderSettings, StagingRegionSettings
from clustermgr.core.errors import ConfigError, ProviderError, StagingError
from clustermgr.providers import capabilities

ACCESS_FIELDS = ("access_key_id", "secret_access_key", "session_token")


def user_prefix(region: StagingRegionSettings, user: str) -> str:
    base = region.s3_prefix.strip("/")
    return f"{base + '/' if base else ''}{user}/"


def policy(bucket: str, prefix: str) -> str:
    """Objects under `prefix` only: read, write, delete, multipart; list only that prefix."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": [
                        "s3:GetObject",
                        "s3:PutObject",
                        "s3:DeleteObject",
                        "s3:AbortMultipartUpload",
                        "s3:ListMultipartUploadParts",
                    ],
                    "Resource": f"arn:aws:s3:::{bucket}/{prefix}*",
                },
                {
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": f"arn:aws:s3:::{bucket}",
                    "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
                },
            ],
        },
        separators=(",", ":"),
    )


def mint(
    provider: ProviderSettings, region: StagingRegionSettings, user: str, duration_s: int
) -> dict[str, Any]:
    """Credentials for `user`'s prefix, and where to use them (the provider whose object
    storage takes them, endpoint, region)."""
    if not region.s3_bucket:
        raise StagingError(f"staging region {region.provider}: no s3_bucket for --transport s3")
    try:
        store = capabilities.object_storage(provider)
    except ConfigError as err:  # an s3 region on a cloud without object storage
        raise StagingError(f"staging region {region.provider}: {err}") from None
    scope = policy(region.s3_bucket, user_prefix(region, user))
    name = f"cmsub-{user}"[:32]
    try:
        credentials = store.scoped_credentials(scope, name, region.s3_role_arn, duration_s)
    except ProviderError as err:
        raise StagingError(
            f"staging region {region.provider}: no S3 credentials for {user} ({err.code}); "
            "ask your admin"
        ) from None
    return {
        "access_key_id": credentials.access_key_id,
        "secret_access_key": credentials.secret_access_key,
        "session_token": credentials.session_token,
        "provider": provider.name,
        "endpoint_url": region.s3_endpoint_url or provider.endpoint_url,
        "region": provider.region,
    }

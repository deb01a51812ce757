"""S3 for job staging (clustermgr.providers.capabilities.ObjectStorage): an S3 client from
the provider's boto3 session, and temporary credentials scoped by a session policy
(sts:AssumeRole with a role, else sts:GetFederationToken of the provider's IAM user)."""

from __future__ import annotations

from typing import Any

from botocore.config import Config

from clustermgr.providers.aws.client import AwsClients
from clustermgr.providers.aws.errors import SDK_ERRORS, provider_error
from clustermgr.providers.capabilities import ObjectCredentials


class AwsObjectStorage:
    def __init__(self, clients: AwsClients) -> None:
        self.clients = clients

    def object_client(self, endpoint_url: str | None, workers: int) -> Any:
        settings = self.clients.settings
        return self.clients.session().client(
            "s3",
            endpoint_url=endpoint_url or settings.endpoint_url,
            config=Config(
                region_name=settings.region,
                retries={"mode": "standard", "max_attempts": 5},
                max_pool_connections=workers + 4,
            ),
        )

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

"""boto3 session and clients for one AWS provider, and where its credentials came from.

Credentials come from boto3's own chain (environment, shared files, instance role) or a
named profile. Messages name where the credentials came from, never the credentials.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from botocore.utils import parse_timestamp

from clustermgr.config import ProviderSettings
from clustermgr.core import progress_marks
from clustermgr.providers.aws.kind import AwsOptions

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

# Calls botocore sends per request, the first included (it retries 5xx and throttling
# itself). Given as `total_max_attempts`: botocore reads `max_attempts` in a client Config as
# retries and adds one (botocore/args.py), so `max_attempts: 4` sent 5 calls.
MAX_ATTEMPTS = 5
MAX_WORKERS = 16  # concurrent calls the provider makes (CreateTags)
# botocore model extras (`service-2.sdk-extras.json`, merged into its EC2 model for this
# provider's session only): see read_fewer_instance_fields
MODELS = Path(__file__).with_name("models")

CREDENTIAL_METHODS = {
    "env": "environment",
    "shared-credentials-file": "shared credentials file",
    "config-file": "shared config file",
    "iam-role": "instance role",
    "container-role": "container role",
    "assume-role": "assumed role",
    "assume-role-with-web-identity": "web identity",
    "sso": "SSO",
    "custom-process": "credential process",
}


def fast_timestamp(value: Any) -> datetime:
    """EC2 answers ISO 8601 timestamps in UTC ("2026-11-26T05:40:00.000Z"); datetime reads
    them itself, several times cheaper than botocore's default (dateutil), which stays the
    fallback for any other form. A DescribeInstances of 5,000 instances holds 15,000 of them
    (bench/bench_burst.py). The instant is the same; only the tzinfo object differs (UTC)."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    found: datetime = parse_timestamp(value)
    return found


def read_fewer_instance_fields(core: botocore.session.Session) -> None:
    """botocore parses every field its model gives an instance (network interfaces, block
    devices, security groups, ...: ~60 fields, ~3 KB of XML each) into dicts; the provider
    reads nine (shapes.py: to_instance, run_launched). Our model extras point the
    instance lists of DescribeInstances and RunInstances at an instance shape holding just
    those nine, so the rest of each item is skipped unparsed: 40% less CPU per instance
    listed, which at 5,000 instances a listing is ~0.8 s (bench/bench_burst.py). The
    extras go first on the session's data path (botocore's `data_path`, as AWS_DATA_PATH
    sets it; a path already set is kept after ours). A field read from an instance must be
    in the extras file (tests/unit/test_aws_shapes.py checks)."""
    found = core.get_config_variable("data_path")
    core.set_config_variable("data_path", os.pathsep.join(filter(None, [str(MODELS), found])))


class AwsClients:
    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self.options = settings.options_as(AwsOptions)
        self.name = settings.name
        self.region = settings.region
        self._lock = threading.Lock()
        self._session: boto3.session.Session | None = None
        self._ec2: EC2Client | None = None
        self._sts: Any = None
        self._source: str | None = None

    def session(self) -> boto3.session.Session:
        with self._lock:
            if self._session is None:
                creds = self.settings.credentials
                profile = creds.profile if creds.source == "profile" else None
                core = botocore.session.Session()
                read_fewer_instance_fields(core)
                parsers = core.get_component("response_parser_factory")
                parsers.set_parser_defaults(timestamp_parser=fast_timestamp)
                self._session = boto3.session.Session(
                    profile_name=profile, region_name=self.region, botocore_session=core
                )
            return self._session

    def _config(self) -> Config:
        return Config(
            region_name=self.region,
            retries={"mode": self.options.retry_mode, "total_max_attempts": MAX_ATTEMPTS},
            max_pool_connections=MAX_WORKERS + 4,
            connect_timeout=min(10.0, self.options.api_timeout_s),
            read_timeout=self.options.api_timeout_s,
            user_agent_extra="clustermgr",
        )

    def ec2(self) -> EC2Client:
        session = self.session()
        with self._lock:
            if self._ec2 is None:
                self._ec2 = session.client(
                    "ec2", endpoint_url=self.settings.endpoint_url, config=self._config()
                )
                self._mark_progress(self._ec2, "ec2")
            return self._ec2

    def sts(self) -> Any:
        session = self.session()
        with self._lock:
            if self._sts is None:
                self._sts = session.client(
                    "sts", endpoint_url=self.settings.endpoint_url, config=self._config()
                )
                self._mark_progress(self._sts, "sts")
            return self._sts

    def _mark_progress(self, client: Any, service: str) -> None:
        """Each API call is a step of the cycle (clustermgr/core/progress_marks.py): it names
        the call when it starts (retries included, so a call hung past its timeouts shows as
        one step) and counts as progress when it returns."""
        name = self.name

        def started(model: Any = None, **_: Any) -> None:
            progress_marks.step(f"provider {name}: {service.upper()} {getattr(model, 'name', '?')}")

        def returned(**_: Any) -> None:
            progress_marks.beat()

        client.meta.events.register(f"before-call.{service}", started)
        client.meta.events.register(f"after-call.{service}", returned)

    def credential_source(self) -> str:
        """Where the credentials came from, for messages (never the credentials)."""
        creds = self.settings.credentials
        if creds.source == "profile":
            return f"profile {creds.profile}"
        if self._source is None:
            try:
                found = self.session().get_credentials()
            except (BotoCoreError, ClientError):
                found = None
            if found is None:
                self._source = "credential chain: none in environment, shared file or instance role"
            else:
                self._source = CREDENTIAL_METHODS.get(found.method, found.method)
        return self._source

"""Credentials and SDK clients of one Azure provider, built lazily and shared by its threads.

`credentials.source`: "default" -> DefaultAzureCredential; "client_secret_file" /
"client_secret_env" -> ClientSecretCredential with the secret read from that file or
environment variable. `authority_host` and `disable_instance_discovery` come from the
settings. Messages name where the secret came from, never the secret.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import requests
from azure.core.credentials import TokenCredential
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.core.pipeline.transport import RequestsTransport
from azure.identity import ClientSecretCredential, DefaultAzureCredential
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.network import NetworkManagementClient
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from clustermgr.config import ProviderSettings
from clustermgr.core import progress_marks
from clustermgr.core.errors import ProviderError
from clustermgr.providers.azure.kind import AzureOptions
from clustermgr.providers.skeleton import auth_error

# azure-core's retry policy: 429/5xx retried (honouring Retry-After), then the error is ours.
RETRY = {"retry_total": 4, "retry_backoff_factor": 0.5, "retry_backoff_max": 30}


class AzureClients:
    def __init__(self, settings: ProviderSettings, pool_size: int = 20) -> None:
        self.settings = settings
        self.options = settings.options_as(AzureOptions)
        self.pool_size = pool_size
        self._lock = threading.Lock()
        self._credential: TokenCredential | None = None
        self._compute: ComputeManagementClient | None = None
        self._network: NetworkManagementClient | None = None

    def credential_source(self) -> str:
        """Where the credentials come from, for messages (never the secret itself)."""
        creds = self.settings.credentials
        who = f"tenant {creds.tenant_id}, client {creds.client_id}"
        if creds.source == "client_secret_file":
            return f"client secret from file {creds.secret_file} ({who})"
        if creds.source == "client_secret_env":
            return f"client secret from environment variable {creds.secret_env} ({who})"
        return "DefaultAzureCredential (environment, workload/managed identity, Azure CLI)"

    def auth_error(self, message: str, code: str = "") -> ProviderError:
        return auth_error(self.settings.name, self.credential_source(), message, code)

    def credential(self) -> TokenCredential:
        with self._lock:
            if self._credential is None:
                self._credential = self._make_credential()
            return self._credential

    def compute(self) -> ComputeManagementClient:
        credential = self.credential()
        with self._lock:
            if self._compute is None:
                self._compute = ComputeManagementClient(
                    credential, self.options.subscription_id, **self._client_options()
                )
            return self._compute

    def network(self) -> NetworkManagementClient:
        credential = self.credential()
        with self._lock:
            if self._network is None:
                self._network = NetworkManagementClient(
                    credential, self.options.subscription_id, **self._client_options()
                )
            return self._network

    def _read_secret(self) -> str:
        creds = self.settings.credentials
        if creds.source == "client_secret_file" and creds.secret_file is not None:
            try:
                secret = creds.secret_file.read_text().strip()
            except OSError as exc:
                raise self.auth_error(f"cannot read: {exc.strerror}", "SecretUnreadable") from None
        else:
            secret = os.environ.get(creds.secret_env or "", "").strip()
        if not secret:
            raise self.auth_error("the client secret is empty or unset", "SecretMissing")
        return secret

    def _make_credential(self) -> TokenCredential:
        creds = self.settings.credentials
        extra: dict[str, Any] = {}
        if self.options.authority_host:
            extra["authority"] = self.options.authority_host
        if creds.source == "default":
            return DefaultAzureCredential(**extra)
        return ClientSecretCredential(
            creds.tenant_id or "",
            creds.client_id or "",
            self._read_secret(),
            disable_instance_discovery=self.options.disable_instance_discovery,
            **extra,
        )

    def _client_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "polling_interval": self.options.polling_interval_s,
            "transport": RequestsTransport(
                session=self._session(),
                session_owner=True,
                connection_timeout=min(10.0, self.options.api_timeout_s),
                read_timeout=self.options.api_timeout_s,
            ),
            **RETRY,
            "per_call_policies": [ProgressMarks(self.settings.name)],
        }
        if self.settings.endpoint_url:
            options["base_url"] = self.settings.endpoint_url
        return options

    def _session(self) -> requests.Session:
        """A session with a connection pool as large as our worker pool (azure-core retries)."""
        session = requests.Session()
        no_retries = Retry(total=False, redirect=False, raise_on_status=False)
        adapter = HTTPAdapter(pool_maxsize=self.pool_size, max_retries=no_retries)
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        return session


class ProgressMarks(SansIOHTTPPolicy[Any, Any]):
    """Each ARM call (a long operation's every poll included) is a step of the cycle
    (clustermgr/progress_marks.py): named when it starts, progress when it is answered."""

    def __init__(self, provider: str) -> None:
        super().__init__()
        self.provider = provider

    def on_request(self, request: PipelineRequest[Any]) -> None:
        method = request.http_request.method
        progress_marks.step(f"provider {self.provider}: Azure {method} {_operation(request)}")

    def on_response(
        self, request: PipelineRequest[Any], response: PipelineResponse[Any, Any]
    ) -> None:
        progress_marks.beat()


def _operation(request: PipelineRequest[Any]) -> str:
    """The resource type of an ARM path (virtualMachines, networkInterfaces, ...)."""
    path = request.http_request.url.split("?", 1)[0]
    providers = path.split("/providers/")
    return providers[-1].split("/")[1] if len(providers) > 1 and "/" in providers[-1] else "call"

"""The openstacksdk Connection of one OpenStack provider, where its credentials come from, and
how often and how long the provider waits on the cloud.

Credentials come from clouds.yaml (`credentials.cloud`; the file is found the usual way, e.g.
OS_CLIENT_CONFIG_FILE); `endpoint_url`, when set, overrides the cloud's Keystone auth_url.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass
from typing import Any

import openstack

from clustermgr.config import ProviderSettings
from clustermgr.providers.openstack.kind import OpenStackOptions


@dataclass(frozen=True)
class Timing:
    """How long and how often the provider waits. Tests make these small."""

    poll_interval_s: float = 2.0  # between reads of servers that are still BUILDing
    active_timeout_s: float = 600.0  # then a BUILDing server is returned as PENDING
    throttle_attempts: int = 4  # calls answered 429 are tried this often in all
    backoff_base_s: float = 0.5  # first backoff; doubles per attempt, with jitter
    backoff_cap_s: float = 20.0  # no single wait longer (Retry-After included)
    max_workers: int = 8  # concurrent server creations / deletions

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter, at least Retry-After, never above the cap."""
        jitter = random.uniform(0.5, 1.0)  # noqa: S311 (spreads retries; not a secret)
        exponential = self.backoff_base_s * (2.0**attempt) * jitter
        return min(self.backoff_cap_s, max(exponential, retry_after or 0.0))


def timing_for(settings: ProviderSettings) -> Timing:
    """Defaults, with `polling_interval_s` when the configuration sets it."""
    interval = settings.options_as(OpenStackOptions).polling_interval_s
    return Timing() if interval is None else Timing(poll_interval_s=interval)


class OpenStackClient:
    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        self.cloud = settings.credentials.cloud or ""
        self._lock = threading.Lock()
        self._connection: Any = None

    def credential_source(self) -> str:
        where = os.environ.get("OS_CLIENT_CONFIG_FILE")
        return f"clouds.yaml cloud {self.cloud!r}" + (f" ({where})" if where else "")

    def connection(self) -> Any:
        """The openstacksdk Connection (made once; authentication happens on first use).
        Reading clouds.yaml may raise the SDK's errors."""
        with self._lock:
            if self._connection is None:
                self._connection = openstack.connect(**self._options())
            return self._connection

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"cloud": self.cloud, "region_name": self.settings.region}
        options["api_timeout"] = self.settings.options_as(OpenStackOptions).api_timeout_s
        if self.settings.endpoint_url:
            options["auth"] = {"auth_url": self.settings.endpoint_url}  # merged into the cloud's
        return options

"""OpenStack provider: Nova servers in one region of one clouds.yaml cloud.

The only modules (with openstack_errors / openstack_shapes / openstack_launch) that import
openstacksdk. Every server carries our tags as Nova metadata; list/terminate only ever touch
servers whose metadata names this cluster. Credentials come from clouds.yaml
(`credentials.cloud`; the file is found the usual way, e.g. OS_CLIENT_CONFIG_FILE);
`endpoint_url`, when set, overrides the cloud's Keystone auth_url.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import openstack
import openstack.exceptions
import requests
from keystoneauth1 import exceptions as ksa_exceptions

from clustermgr.config import ProviderSettings
from clustermgr.errors import ErrorKind, ProviderError
from clustermgr.providers.base import (
    TAG_CLUSTER,
    CheckResult,
    CloudInstance,
    InstanceType,
    LaunchResult,
    LaunchSpec,
)
from clustermgr.providers.openstack_errors import (
    NOT_FOUND_CODES,
    OpenStackFailure,
    classify,
    is_not_found,
)
from clustermgr.providers.openstack_launch import Launcher
from clustermgr.providers.openstack_shapes import instance_of, instance_type_of

log = logging.getLogger(__name__)

T = TypeVar("T")
SDK_ERRORS: tuple[type[BaseException], ...] = (
    openstack.exceptions.SDKException,
    ksa_exceptions.ClientException,
    requests.RequestException,
)
CATALOG_TTL_S = 3600.0
API_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Timing:
    """How long and how often the provider waits. Tests make these small."""

    poll_interval_s: float = 2.0  # between reads of servers that are still BUILDing
    active_timeout_s: float = 600.0  # then a BUILDing server is returned as PENDING
    throttle_attempts: int = 4  # calls answered 429 are tried this often in all
    backoff_base_s: float = 0.5  # first backoff; doubles per attempt, with jitter
    backoff_cap_s: float = 20.0  # no single wait longer (Retry-After included)
    max_workers: int = 8  # concurrent server creations / deletions


def timing_for(settings: ProviderSettings) -> Timing:
    """Defaults, with `polling_interval_s` when the configuration sets it."""
    if "polling_interval_s" in settings.model_fields_set:
        return Timing(poll_interval_s=settings.polling_interval_s)
    return Timing()


class OpenStackProvider:
    kind: ClassVar[str] = "openstack"

    def __init__(self, settings: ProviderSettings, cluster: str) -> None:
        self.settings = settings
        self.name = settings.name
        self.cluster = cluster
        self.region = settings.region
        self.cloud = settings.credentials.cloud or ""
        self.timing = timing_for(settings)
        self._lock = threading.Lock()
        self._connection: Any = None
        self._catalog: tuple[float, list[Any]] | None = None

    # ------------------------------------------------------------------ connection

    def credential_source(self) -> str:
        where = os.environ.get("OS_CLIENT_CONFIG_FILE")
        return f"clouds.yaml cloud {self.cloud!r}" + (f" ({where})" if where else "")

    def auth_error(self, message: str, code: str = "") -> ProviderError:
        """AUTH naming the provider and where the credentials came from, never the secret."""
        return ProviderError(
            ErrorKind.AUTH,
            f"credentials from {self.credential_source()} were not accepted: {message}",
            provider=self.name,
            code=code,
        )

    def connection(self) -> Any:
        """The openstacksdk Connection (made once; authentication happens on first use)."""
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            return self._connection

    def service(self, name: str) -> Any:
        """A service proxy ("compute", "image", "network"); the first one authenticates."""
        return self.call(f"connecting to {name}", lambda: getattr(self.connection(), name))

    def _connect(self) -> Any:
        options: dict[str, Any] = {"cloud": self.cloud, "region_name": self.region}
        options["api_timeout"] = API_TIMEOUT_S
        if self.settings.endpoint_url:
            options["auth"] = {"auth_url": self.settings.endpoint_url}  # merged into the cloud's
        try:
            return openstack.connect(**options)
        except SDK_ERRORS as exc:
            raise self.error(classify(exc), "reading clouds.yaml") from None

    def error(self, failure: OpenStackFailure, what: str) -> ProviderError:
        """The ProviderError for a classified failure (AUTH names the credential source)."""
        if failure.kind is ErrorKind.AUTH:
            return self.auth_error(failure.message, failure.code)
        return ProviderError(
            failure.kind, f"{what}: {failure.message}", provider=self.name, code=failure.code
        )

    def call(self, what: str, fn: Callable[[], T], operation: str = "") -> T:
        """Run one SDK call; 429 is retried with backoff, every failure becomes ProviderError."""
        attempts = max(1, self.timing.throttle_attempts)
        for attempt in range(attempts):
            try:
                return fn()
            except ProviderError:
                raise
            except SDK_ERRORS as exc:
                failure = classify(exc, operation)
                if failure.kind is ErrorKind.THROTTLED and attempt + 1 < attempts:
                    delay = self.backoff(attempt, failure.retry_after)
                    log.info("%s: throttled, retrying in %.2fs", what, delay)
                    time.sleep(delay)
                    continue
                raise self.error(failure, what) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter, at least Retry-After, never above the cap."""
        timing = self.timing
        jitter = random.uniform(0.5, 1.0)  # noqa: S311 (spreads retries; not a secret)
        exponential = timing.backoff_base_s * (2.0**attempt) * jitter
        return min(timing.backoff_cap_s, max(exponential, retry_after or 0.0))

    # ------------------------------------------------------------------ catalog

    def flavors(self) -> list[Any]:
        """Every flavor with its extra specs (in the listing from microversion 2.61; read one
        flavor at a time from older clouds, and for flavors that have none)."""
        with self._lock:
            cached = self._catalog
        if cached is not None and time.monotonic() - cached[0] < CATALOG_TTL_S:
            return cached[1]
        compute = self.service("compute")
        found = self.call(
            "listing flavors",
            lambda: list(compute.flavors(details=True, get_extra_specs=True)),
        )
        with self._lock:
            self._catalog = (time.monotonic(), found)
        return found

    def refresh_flavors(self) -> list[Any]:
        with self._lock:
            self._catalog = None
        return self.flavors()

    def flavor_names(self) -> dict[str, str]:
        """Flavor id -> name, for servers from clouds older than microversion 2.47."""
        try:
            return {str(f.id): str(f.name) for f in self.flavors()}
        except ProviderError as exc:
            if exc.kind is ErrorKind.AUTH:
                raise
            return {}

    def catalog(self) -> Sequence[InstanceType]:
        types = {t.name: t for t in (instance_type_of(f) for f in self.flavors())}
        return sorted(types.values(), key=lambda t: t.name)

    # ------------------------------------------------------------------ list

    def our_servers(self) -> list[Any]:
        """Every server whose metadata names this cluster (all pages)."""
        compute = self.service("compute")
        servers = self.call("listing servers", lambda: list(compute.servers(details=True)))
        return [s for s in servers if (s.metadata or {}).get(TAG_CLUSTER) == self.cluster]

    def list_instances(self) -> dict[str, CloudInstance]:
        servers = self.our_servers()
        names = self.flavor_names() if servers else {}
        instances = (instance_of(s, names) for s in servers)
        return {inst.instance_id: inst for inst in instances}

    # ------------------------------------------------------------------ launch

    def launch(self, spec: LaunchSpec, count: int, request_id: str) -> LaunchResult:
        return Launcher(self, spec, count, request_id).run()

    # ------------------------------------------------------------------ terminate

    def terminate(self, instance_ids: Sequence[str], request_id: str) -> None:
        ids = list(dict.fromkeys(instance_ids))
        if not ids:
            return
        log.info("terminating %d server(s) (request %s)", len(ids), request_id)
        self.parallel(self._terminate_one, ids)

    def _terminate_one(self, server_id: str) -> None:
        server = self.get_server(server_id)
        if server is None:
            return
        if (server.metadata or {}).get(TAG_CLUSTER) != self.cluster:
            log.warning("not terminating server %s: it is not tagged as ours", server_id)
            return
        self.delete_server(server_id)

    def get_server(self, server_id: str) -> Any | None:
        """The server, or None when it is gone."""
        compute = self.service("compute")
        try:
            return self.call(f"reading server {server_id}", lambda: compute.get_server(server_id))
        except ProviderError as exc:
            if exc.code in NOT_FOUND_CODES:
                return None
            raise

    def delete_server(self, server_id: str) -> None:
        """Delete; a server that is already gone is fine."""
        compute = self.service("compute")

        def delete() -> None:
            try:
                compute.delete_server(server_id, ignore_missing=True)
            except SDK_ERRORS as exc:
                if not is_not_found(exc):
                    raise

        self.call(f"deleting server {server_id}", delete, operation="delete")

    # ------------------------------------------------------------------ check

    def check(self) -> list[CheckResult]:
        try:
            conn = self.connection()
            # session.get_token, not Connection.authorize: that one hides the 401 as SDKException
            self.call("requesting a token", conn.session.get_token)
        except ProviderError as exc:
            return [CheckResult("token", False, str(exc))]
        except Exception as exc:  # check() never raises
            return [CheckResult("token", False, f"unexpected {type(exc).__name__}")]
        results = [CheckResult("token", True, f"token issued ({self.credential_source()})")]
        results.append(self._check_one("compute endpoint", self._check_compute))
        results.append(self._check_one("flavors", self._check_flavors))
        return results

    def _check_compute(self) -> str:
        compute = self.service("compute")
        endpoint = self.call("finding the compute endpoint", compute.get_endpoint)
        self.call(
            "listing servers", lambda: next(iter(compute.servers(details=False, limit=1)), None)
        )
        return f"compute endpoint {endpoint} in {self.region} reachable"

    def _check_flavors(self) -> str:
        types = self.catalog()
        if not types:
            raise ProviderError(ErrorKind.OTHER, f"no flavors offered in {self.region}")
        gpus = sum(1 for t in types if t.gpu_count)
        return f"{len(types)} flavors in {self.region} ({gpus} with GPUs)"

    def _check_one(self, name: str, fn: Callable[[], str]) -> CheckResult:
        try:
            return CheckResult(name, True, fn())
        except ProviderError as exc:
            return CheckResult(name, False, str(exc))
        except Exception as exc:  # check() never raises
            return CheckResult(name, False, f"unexpected {type(exc).__name__}")

    # ------------------------------------------------------------------ helpers

    def parallel(self, fn: Callable[[T], Any], items: Sequence[T]) -> list[Any]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        workers = min(max(1, self.timing.max_workers), len(items))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openstack") as pool:
            return list(pool.map(fn, items))

"""What every cloud provider does the same way; a cloud package writes only what differs.

`CloudProvider` owns the launch skeleton (prepare: validate the spec and resolve what it
names -> the cloud's own launch -> merged errors -> LaunchResult), the catalog cache (one
TTL), `check()` (each check in its own try/except; the first, credentials, stops the rest
when it fails), and turning an SDK failure into a ProviderError (AUTH names where the
credentials came from, never the credentials). A cloud package supplies its SDK's
exception classes and `classify(exc) -> Failure` (errors.py), where its credentials come
from (client.py), and the hooks marked abstract below (provider.py).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import (
    ALL_OR_NOTHING,
    CheckResult,
    CloudInstance,
    InstanceState,
    InstanceType,
    LaunchError,
    LaunchResult,
    LaunchSpec,
    invalid,
    short_whole,
)

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

log = logging.getLogger(__name__)

CATALOG_TTL_S = 3600.0
# a released instance listed in these states was not terminated (terminating counts as gone)
STILL_UP = frozenset({InstanceState.PENDING, InstanceState.RUNNING})
MESSAGE_LIMIT = 240
AUTH_MESSAGE = "credentials rejected ({source}): {message}"
T = TypeVar("T")
U = TypeVar("U")
PlanT = TypeVar("PlanT")
Check = tuple[str, Callable[[], str]]


@dataclass(frozen=True)
class Failure:
    """One SDK failure, classified from its code (never its message text)."""

    kind: ErrorKind
    code: str  # the SDK's own error code (or what stands for one: HTTP status, class name)
    message: str
    status: int | None = None  # HTTP status, when there was an answer
    retry_after: float | None = None  # seconds, from a throttling answer's Retry-After

    def launch_error(
        self, instance_type: str | None = None, zone: str | None = None, count: int = 0
    ) -> LaunchError:
        return LaunchError(self.kind, self.code, self.message, instance_type, zone, count)


def first_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """An error message for one line: its first line, bounded ("" for no text)."""
    lines = text.strip().splitlines()
    return lines[0][:limit] if lines else ""


def merge_errors(errors: list[LaunchError]) -> list[LaunchError]:
    """One LaunchError per (kind, code, type, zone), counts added, first-seen order."""
    merged: dict[tuple[Any, ...], LaunchError] = {}
    for err in errors:
        key = (err.kind, err.code, err.instance_type, err.zone)
        old = merged.get(key)
        merged[key] = err if old is None else replace(old, count=old.count + err.count)
    return list(merged.values())


def parallel(fn: Callable[[T], U], items: Sequence[T], workers: int, prefix: str) -> list[U]:
    """fn over items on at most `workers` threads, results in order (one item: no thread)."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    size = min(max(1, workers), len(items))
    with ThreadPoolExecutor(max_workers=size, thread_name_prefix=prefix) as pool:
        return list(pool.map(fn, items))


def auth_error(
    provider: str, source: str, message: str, code: str = "", template: str = AUTH_MESSAGE
) -> ProviderError:
    """AUTH naming the provider and where the credentials came from, never the credentials."""
    text = template.format(source=source, message=message)
    return ProviderError(ErrorKind.AUTH, text, provider=provider, code=code)


class TtlCache(Generic[T]):
    """One value, read again once it is older than the TTL; safe across threads."""

    def __init__(self, ttl_s: float = CATALOG_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._entry: tuple[float, T] | None = None

    def get(self, load: Callable[[], T]) -> T:
        with self._lock:
            entry = self._entry
        if entry is not None and time.monotonic() - entry[0] < self.ttl_s:
            return entry[1]
        value = load()
        with self._lock:
            self._entry = (time.monotonic(), value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entry = None


@dataclass(frozen=True)
class Sdk:
    """What the shared code needs of a cloud's SDK (the cloud's errors.py makes one)."""

    errors: tuple[type[BaseException], ...]  # the SDK's exception classes
    classify: Callable[[BaseException], Failure]  # one of those -> Failure


@dataclass(frozen=True)
class Words:
    """What a cloud calls things, in messages and check names."""

    instance: str = "instance"
    instance_type: str = "instance type"
    credential_check: str = "credentials"  # the name of the first check
    auth_message: str = AUTH_MESSAGE  # with {source} and {message}


class CloudProvider(ABC, Generic[PlanT]):
    """The shared half of a cloud provider (see the module docstring).

    `PlanT` is what `prepare` found for one launch and `start` launches from.
    """

    kind: ClassVar[str]
    sdk: ClassVar[Sdk]
    words: ClassVar[Words] = Words()

    def __init__(self, settings: ProviderSettings, cluster: str) -> None:
        self.settings = settings
        self.name = settings.name
        self.cluster = cluster
        self.region = settings.region
        self.catalog_cache: TtlCache[list[InstanceType]] = TtlCache()

    # ------------------------------------------------------------------ the cloud's part

    @abstractmethod
    def credential_source(self) -> str:
        """Where the credentials come from, for messages (never the credentials)."""

    @abstractmethod
    def prepare(self, spec: LaunchSpec, count: int, request_id: str) -> PlanT | None:
        """Validate the spec (INVALID naming template and field) and resolve what it names;
        None when there is nothing to launch."""

    @abstractmethod
    def start(self, plan: PlanT, result: LaunchResult) -> None:
        """Launch: add the instances started and the LaunchErrors met to `result`."""

    @abstractmethod
    def read_catalog(self) -> list[InstanceType]:
        """The region's instance types, sorted by name (cached by `catalog`)."""

    @abstractmethod
    def check_credentials(self) -> str:
        """The first check: the credentials are accepted. Returns its detail line or raises."""

    @abstractmethod
    def checks(self) -> list[Check]:
        """The checks after the credentials, as (name, check) in order."""

    @abstractmethod
    def list_instances(self) -> dict[str, CloudInstance]: ...

    @abstractmethod
    def remove(self, instance_ids: list[str], request_id: str) -> None:
        """Terminate these instances (no duplicates, at least one); gone is not an error."""

    # ------------------------------------------------------------------ SDK failures

    def auth_error(self, message: str, code: str = "") -> ProviderError:
        source = self.credential_source()
        return auth_error(self.name, source, message, code, self.words.auth_message)

    def error(self, failure: Failure | BaseException, what: str) -> ProviderError:
        """The ProviderError for an SDK failure (AUTH names the credential source)."""
        if not isinstance(failure, Failure):
            failure = self.sdk.classify(failure)
        if failure.kind is ErrorKind.AUTH:
            return self.auth_error(failure.message, failure.code)
        return ProviderError(
            failure.kind, f"{what}: {failure.message}", provider=self.name, code=failure.code
        )

    def failure(self, exc: BaseException) -> Failure:
        """A failure to report in a LaunchResult; AUTH is raised instead."""
        failure = self.sdk.classify(exc)
        if failure.kind is ErrorKind.AUTH:
            raise self.auth_error(failure.message, failure.code) from None
        return failure

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run SDK calls; every SDK failure becomes a one-line ProviderError."""
        try:
            return fn()
        except self.sdk.errors as exc:
            raise self.error(exc, what) from None

    # ------------------------------------------------------------------ launch

    def bad(self, spec: LaunchSpec, field_name: str, value: str, why: str) -> ProviderError:
        """INVALID naming the template and the field, raised before anything is launched."""
        return invalid(self.name, spec.template, field_name, value, why)

    def need_names(self, spec: LaunchSpec, count: int) -> None:
        if count > len(spec.node_names):
            have = str(len(spec.node_names))
            raise self.bad(spec, "node_names", have, f"{count} instances need names")

    def launch(self, spec: LaunchSpec, count: int, request_id: str) -> LaunchResult:
        result = LaunchResult(request_id=request_id, requested=count)
        try:
            plan = self.prepare(spec, count, request_id)
        except ProviderError as exc:
            if exc.kind in (ErrorKind.INVALID, ErrorKind.AUTH):
                raise
            result.errors.append(LaunchError(exc.kind, exc.code, str(exc), count=count))
            return result
        if plan is None:
            return result
        log.info(
            "launching %d %s(s) of template %s (request %s)",
            count,
            self.words.instance,
            spec.template,
            request_id,
        )
        self.start(plan, result)
        result.errors = merge_errors(result.errors)
        if spec.all_or_nothing and result.missing:
            self.keep_none(result)
        if result.missing:
            log.warning(
                "request %s: %d of %d %s(s) started (%s)",
                request_id,
                len(result.instances),
                count,
                self.words.instance,
                "; ".join(e.reason() for e in result.errors[:3]),
            )
        return result

    # ------------------------------------------------------------------ all or nothing

    def keep_none(self, result: LaunchResult) -> None:
        """An all-or-nothing launch came back short: release what started (what cannot be
        released stays in the result, for the engine to bind and terminate as failed), and
        put the all-or-nothing reason first."""
        got = len(result.instances)
        left = set(self.release([i.instance_id for i in result.instances], result.request_id))
        result.instances = [i for i in result.instances if i.instance_id in left]
        whole = [e for e in result.errors if e.code == ALL_OR_NOTHING]
        if got:
            result.errors.insert(0, short_whole(got, result.requested, released=not left))
        elif whole:
            result.errors.remove(whole[0])
            result.errors.insert(0, whole[0])
        elif not result.errors or result.errors[0].kind is ErrorKind.CAPACITY:
            first = f" ({result.errors[0].code})" if result.errors else ""
            message = f"all-or-nothing: got 0 of {result.requested} on every type and zone{first}"
            error = LaunchError(ErrorKind.CAPACITY, ALL_OR_NOTHING, message, count=result.requested)
            result.errors.insert(0, error)

    def release(self, instance_ids: Sequence[str], request_id: str) -> list[str]:
        """Terminate the instances of a launch that came back short, then look: the ids still
        live after a second try (none when all are gone)."""
        left = list(dict.fromkeys(instance_ids))
        for attempt in (1, 2):
            if not left:
                return []
            try:
                self.remove(left, f"{request_id}-release{attempt}")
                listed = self.list_instances()
            except ProviderError as exc:
                log.warning("request %s: releasing %d instance(s): %s", request_id, len(left), exc)
                continue
            left = [
                i for i in left if i in listed and listed[i].state is not InstanceState.TERMINATED
            ]
        if left:
            log.warning("request %s: %d instance(s) not released yet", request_id, len(left))
        return left

    # ------------------------------------------------------------------ terminate

    def terminate(self, instance_ids: Sequence[str], request_id: str) -> None:
        ids = list(dict.fromkeys(instance_ids))
        if not ids:
            return
        log.info("terminating %d %s(s) (request %s)", len(ids), self.words.instance, request_id)
        self.remove(ids, request_id)

    # ------------------------------------------------------------------ catalog

    def catalog(self) -> Sequence[InstanceType]:
        return self.catalog_cache.get(self.read_catalog)

    def check_catalog(self) -> str:
        """A check: the catalog is readable and not empty."""
        types = self.catalog()
        if not types:
            raise ProviderError(
                ErrorKind.OTHER, f"no {self.words.instance_type}s offered in {self.region}"
            )
        gpus = sum(1 for t in types if t.gpu_count)
        return f"{len(types)} {self.words.instance_type}s in {self.region} ({gpus} with GPUs)"

    # ------------------------------------------------------------------ check

    def check(self) -> list[CheckResult]:
        """One result per check; when the credentials fail, only that one."""
        first = self.check_one(self.words.credential_check, self.check_credentials)
        if not first.ok:
            return [first]
        return [first, *(self.check_one(name, fn) for name, fn in self.checks())]

    def check_one(self, name: str, fn: Callable[[], str]) -> CheckResult:
        try:
            return CheckResult(name, True, fn())
        except ProviderError as exc:
            return CheckResult(name, False, str(exc))
        except self.sdk.errors as exc:
            return CheckResult(name, False, str(self.error(exc, name)))
        except Exception as exc:  # check() never raises; the class name carries no secret
            return CheckResult(name, False, f"{name} failed: {type(exc).__name__}")

"""What one OpenStack launch works with: the provider as the launch sees it (`Nova`), one
flavor x zone to try (`Attempt`), one node's server (`NodeTask`), and what the all-or-nothing
rounds give their create step (`Rounds`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import CloudInstance, LaunchError, LaunchSpec
from clustermgr.providers.openstack.client import Timing

T = TypeVar("T")
U = TypeVar("U")


class Nova(Protocol):
    """What a launch needs from the OpenStack provider."""

    cluster: str
    region: str
    timing: Timing

    def bad(self, spec: LaunchSpec, field_name: str, value: str, why: str) -> ProviderError: ...

    def need_names(self, spec: LaunchSpec, count: int) -> None: ...

    def service(self, name: str) -> Any: ...

    def call(self, what: str, fn: Callable[[], T], operation: str = "") -> T: ...

    def flavors(self) -> list[Any]: ...

    def refresh_flavors(self) -> list[Any]: ...

    def flavor_names(self) -> dict[str, str]: ...

    def our_servers(self) -> list[Any]: ...

    def get_server(self, server_id: str) -> Any | None: ...

    def delete_server(self, server_id: str) -> None: ...

    def rename_server(self, server_id: str, name: str) -> None: ...

    def set_metadata(self, server_id: str, metadata: dict[str, str]) -> None: ...

    def release(self, instance_ids: Sequence[str], request_id: str) -> list[str]: ...

    def parallel(self, fn: Callable[[T], U], items: Sequence[T]) -> list[U]: ...


@dataclass(frozen=True)
class Attempt:
    flavor: str
    flavor_id: str
    zone: str | None


@dataclass
class NodeTask:
    node: str
    name: str
    attempts: deque[Attempt]
    current: Attempt | None = None
    server_id: str | None = None
    server: Any = None
    instance: CloudInstance | None = None
    errors: list[LaunchError] = field(default_factory=list)
    done: bool = False

    @property
    def wants_server(self) -> bool:
        return (
            not self.done
            and self.instance is None
            and self.server_id is None
            and bool(self.attempts)
        )

    @property
    def waiting(self) -> bool:
        return not self.done and self.instance is None and self.server_id is not None

    def fail(self, kind: ErrorKind, code: str, message: str, final: bool = True) -> None:
        at = self.current
        zone = at.zone if at else None
        self.errors.append(LaunchError(kind, code, message, at.flavor if at else None, zone, 1))
        self.done = self.done or final


class Rounds(Protocol):
    """What the create step of the all-or-nothing rounds (multicreate.py) uses of them."""

    nova: Nova
    request_id: str
    halt: ProviderError | None

    def base_attrs(self, attempt: Attempt, name: str) -> dict[str, Any]: ...

    def create(
        self, what: str, attrs: Callable[[], dict[str, Any]], tasks: Sequence[NodeTask]
    ) -> Any | None: ...

    def reuse(self, task: NodeTask, server: Any) -> None: ...

    def discard(self, server_id: str) -> None: ...

"""Who may hold a connection to the staging service, so that no caller can starve it or
cm-scale (docs/staging.md "Limits").

A caller (a uid on the UNIX socket, an address over TCP, where the uid is known only once
the request is read) holds at most `max_connections_per_caller` connections, everyone
together `max_connections`, and none is admitted while fewer than `descriptor_reserve`
file descriptors are left to the process: the cycle, the heartbeat and the hooks' socket
share cm-scale's descriptors with this service. A refused connection is closed at once;
a caller's refusals are logged once, until its connections have all ended.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from clustermgr.config import StagingSettings

log = logging.getLogger(__name__)
MAX_REMEMBERED = 1024  # callers whose refusals are being counted (beyond: not logged)


@dataclass(frozen=True)
class Limits:
    request_timeout_s: float
    max_connections: int
    max_connections_per_caller: int
    descriptor_reserve: int
    backlog: int

    @classmethod
    def of(cls, staging: StagingSettings) -> Limits:
        return cls(
            staging.request_timeout_s,
            staging.max_connections,
            staging.max_connections_per_caller,
            staging.descriptor_reserve,
            staging.backlog,
        )


def open_descriptors() -> int:
    """How many file descriptors this process holds (Linux: its /proc/self/fd)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own descriptor
    except OSError:
        return 0


def descriptor_limit() -> int:
    """The soft RLIMIT_NOFILE: what open(2), socket(2) and accept(2) fail with EMFILE past."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class Gate:
    def __init__(
        self,
        limits: Limits,
        descriptors: Callable[[], int] = open_descriptors,
        limit: Callable[[], int] = descriptor_limit,
    ) -> None:
        self.limits = limits
        self._descriptors = descriptors
        self._limit = limit
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()  # this episode's refusals, per caller

    def admit(self, caller: str) -> str | None:
        """None when `caller` may have one more connection (counted until `release`), else
        why not, in one line for the caller."""
        with self._lock:
            refusal = self._why_not(caller)
            if refusal is None:
                self._open[caller] += 1
                return None
        self.dropped(caller, refusal)
        return refusal

    def dropped(self, caller: str, why: str) -> None:
        """A connection of `caller` refused or ended for `why`: logged once per episode."""
        with self._lock:
            first = caller not in self._refused
            if first and len(self._refused) >= MAX_REMEMBERED:
                return
            self._refused[caller] += 1
        if first:
            log.warning(
                "staging: dropping connections of %s: %s (logged once until its "
                "connections have ended)",
                caller,
                why,
            )

    def _why_not(self, caller: str) -> str | None:
        limits = self.limits
        held = self._open[caller]
        if held >= limits.max_connections_per_caller:
            most = limits.max_connections_per_caller
            return f"{held} connections open, at most {most} per caller"
        total = sum(self._open.values())
        if total >= limits.max_connections:
            return f"the service holds {total} connections, at most {limits.max_connections}"
        free = self._limit() - self._descriptors()
        if free < limits.descriptor_reserve:
            return (
                f"{free} file descriptors left, {limits.descriptor_reserve} are kept for "
                "cm-scale's cycle"
            )
        return None

    def release(self, caller: str) -> None:
        with self._lock:
            self._open[caller] -= 1
            if self._open[caller] > 0:
                return
            del self._open[caller]
            dropped = self._refused.pop(caller, 0)
        if dropped:
            log.warning("staging: %s's connections have ended; %d were dropped", caller, dropped)

    def warnings(self) -> list[str]:
        """Why the caps cannot hold as configured (said once at start)."""
        limit = self._limit()
        limits = self.limits
        needed = limits.max_connections + limits.descriptor_reserve
        if needed <= limit:
            return []
        return [
            f"[staging] max_connections ({limits.max_connections}) + descriptor_reserve "
            f"({limits.descriptor_reserve}) exceed the descriptor limit ({limit}): connections "
            "are refused once the reserve is reached (raise LimitNOFILE, or lower the caps)"
        ]

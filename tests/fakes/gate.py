"""Hold one request of a cloud fake, so a test can kill the client at that very point.

A crash test needs the daemon caught in a named window of a cloud call: before the cloud
acted on a request (the launch never reached it), or after the cloud acted but before
the client read the answer (the instances exist; the daemon does not know it). A `Gate`
matches the `nth` request whose key (the fake's own: an EC2 action, `METHOD /path` for
the HTTP fakes) contains `contains`, case-insensitive. When that request arrives the fake
holds it, `before` or `after` acting on it, and sets `reached`; the test kills the
client, then `release()`s the gate. A request held before it was acted on is then answered
with 503 and never carried out (the cloud never saw it); one held after is answered as it
would have been, to a client that is gone.

    gate = fake.hold_next("CreateTags", nth=5, after=True)
    ... start the daemon; gate.reached.wait(60); kill it ...
    gate.release()

A fake releases every gate when it stops, so no request thread outlives it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

HOLD_LIMIT_S = 600.0  # a gate nobody releases lets go after this (the fake is stopping)


@dataclass
class Gate:
    contains: str
    nth: int = 1
    after: bool = False
    seen: int = 0
    taken: bool = False  # the request to hold has arrived
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def hold(self) -> None:
        """Called by the fake on the request it holds: blocks until released."""
        self.reached.set()
        self.released.wait(HOLD_LIMIT_S)

    def release(self) -> None:
        self.released.set()

    @property
    def where(self) -> str:
        return f"{'after' if self.after else 'before'} request {self.nth} of {self.contains!r}"


class Gates:
    """The gates of one fake; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: list[Gate] = []

    def add(self, contains: str, nth: int = 1, after: bool = False) -> Gate:
        gate = Gate(contains.lower(), max(1, nth), after)
        with self._lock:
            self._gates.append(gate)
        return gate

    def arrive(self, key: str) -> Gate | None:
        """Count `key` against every open gate; the gate that holds this request, if any."""
        key = key.lower()
        with self._lock:
            for gate in self._gates:
                if gate.taken or gate.contains not in key:
                    continue
                gate.seen += 1
                if gate.seen == gate.nth:
                    gate.taken = True
                    return gate
        return None

    def release_all(self) -> None:
        with self._lock:
            gates, self._gates = self._gates, []
        for gate in gates:
            gate.release()

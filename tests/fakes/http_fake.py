"""The HTTP scaffolding the cloud fakes share (azure_fake.py, openstack_fake.py).

`HttpFake` is a fake cloud served by a threaded HTTP server on 127.0.0.1 (HTTPS when the
fake gives a TLS context), started and stopped by the test (`start()`/`stop()`, or
`with Fake() as fake:`). A cloud's fake keeps only its API: `serve` answers one request
with a `Reply`, `info` says how to reach it, `error` builds its own error for the control
endpoint. Shared here: the server that tracks its connections (so `stop` never waits for a
client's keep-alive), the handler that reads a request whole (a request cut short by a dying
client is never carried out) and writes the JSON answer, holding one request before or
after it is carried out (`hold_next`, tests/fakes/gate.py), the record of the requests
seen, fault control from another process (`POST /_fake/<method>` with JSON arguments, for
the methods named in `control_methods`), and `serve_until_signalled` for
`python -m tests.fakes.<cloud>_fake`.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import ssl
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self, TypeVar
from urllib.parse import unquote, urlsplit

from tests.fakes.gate import Gate, Gates

JSON = dict[str, Any]
CONTROL_PREFIX = "/_fake/"


@dataclass(frozen=True)
class Req:
    """One request as a cloud's routes see it: `segs` are the path's segments left to route."""

    method: str
    path: str  # unquoted, without the query
    query: dict[str, str]
    segs: list[str]
    body: bytes


@dataclass
class Reply:
    status: int
    body: Any  # JSON-serialisable, or bytes sent as they are; None: no body
    headers: dict[str, str] = field(default_factory=dict)


class HttpFake(ABC):
    """One fake cloud on 127.0.0.1: the lifecycle, holds, request record and control."""

    thread_name: ClassVar[str] = "http-fake"
    control_methods: ClassVar[tuple[str, ...]] = ()
    content_type: ClassVar[str] = "application/json"
    held_body: ClassVar[JSON] = {"error": {"code": 503, "message": "held, never carried out"}}
    paths_ignore_case: ClassVar[bool] = False  # `requests(path_contains=...)` matching

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.gates = Gates()
        self.seen: list[tuple[str, str]] = []  # (method, path) of every request, in order
        self._server: FakeServer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- the cloud's part

    @abstractmethod
    def serve(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Reply:
        """Answer one request (`headers` with lower-cased names)."""

    @abstractmethod
    def info(self) -> JSON:
        """How a client reaches this fake (printed by `serve_until_signalled`)."""

    @abstractmethod
    def error(self, status: int, message: str) -> Exception:
        """The cloud's own error, raised inside `serve` and answered in its own shape."""

    def tls_context(self) -> ssl.SSLContext | None:
        """A server context for HTTPS; None (the default) serves plain HTTP."""
        return None

    def reply_headers(self, path: str) -> dict[str, str]:
        """Headers the cloud adds to every answer (a request id, a version)."""
        return {}

    def cleanup(self) -> None:  # noqa: B027 (optional: most fakes make nothing to remove)
        """Remove what `tls_context` made, after the server stopped."""

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        server = FakeServer(("127.0.0.1", 0), FakeHandler)
        server.fake = self
        context = self.tls_context()
        if context is not None:
            server.socket = context.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
            server.tls = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.gates.release_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.cleanup()

    @property
    def port(self) -> int:
        assert self._server is not None, "fake not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        assert self._server is not None, "fake not started"
        return f"{'https' if self._server.tls else 'http'}://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- faults, inspection

    def hold_next(self, contains: str, nth: int = 1, after: bool = False) -> Gate:
        """Hold the `nth` next request whose `METHOD /path` contains `contains`, before or
        after carrying it out, until released."""
        return self.gates.add(contains, nth, after)

    def record(self, method: str, path: str) -> None:
        with self.lock:
            self.seen.append((method, path))

    def requests(self, method: str | None = None, path_contains: str = "") -> list[tuple[str, str]]:
        """The requests seen, of `method` (any when None) whose path contains `path_contains`."""
        fold: Callable[[str], str] = str.lower if self.paths_ignore_case else str
        with self.lock:
            return [
                (m, p)
                for m, p in self.seen
                if (method is None or m == method) and fold(path_contains) in fold(p)
            ]

    def control(self, name: str, body: bytes) -> Reply:
        """`POST /_fake/<name>`: `info`, or one of `control_methods` with JSON arguments."""
        if name == "info":
            return Reply(200, self.info())
        if name not in self.control_methods:
            raise self.error(404, f"no control method {name}")
        getattr(self, name)(**(json.loads(body) if body else {}))
        return Reply(200, {"ok": True})

    # ----------------------------------------------------------------- requests

    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Reply:
        gate = self.gates.arrive(f"{method} {unquote(urlsplit(raw_path).path)}")
        if gate is not None and not gate.after:
            gate.hold()
            return Reply(503, self.held_body)
        reply = self.serve(method, raw_path, headers, body)
        if gate is not None:
            gate.hold()
        return reply


class FakeServer(ThreadingHTTPServer):
    daemon_threads = False  # joined by server_close(), after close_connections()
    block_on_close = True
    fake: HttpFake
    tls = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open_sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()

    def close_connections(self) -> None:
        with self.sockets_lock:
            for sock in list(self.open_sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    server: FakeServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms stalls
        with self.server.sockets_lock:
            self.server.open_sockets.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server.sockets_lock:
            self.server.open_sockets.discard(self.connection)

    def handle(self) -> None:
        if self.server.tls:  # the handshake here, in the connection's thread
            try:
                getattr(self.connection, "do_handshake")()  # noqa: B009 (an SSLSocket)
            except (OSError, ssl.SSLError):
                self.close_connection = True
                return
        with contextlib.suppress(OSError, ssl.SSLError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client died sending it: the cloud never got it
            self.close_connection = True
            return
        fake = self.server.fake
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply = fake.handle(self.command, self.path, headers, body)
        raw = isinstance(reply.body, bytes)
        data = b"" if reply.body is None else reply.body if raw else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        if reply.body is not None:
            self.send_header(
                "Content-Type", "application/octet-stream" if raw else fake.content_type
            )
        self.send_header("Content-Length", str(len(data)))
        for key, value in fake.reply_headers(self.path).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_DELETE = do_POST = do_PATCH = do_HEAD = _serve


FakeT = TypeVar("FakeT", bound=HttpFake)


@contextlib.contextmanager
def running(factory: Callable[..., FakeT], **kwargs: Any) -> Iterator[FakeT]:
    fake = factory(**kwargs).start()
    try:
        yield fake
    finally:
        fake.stop()


def serve_until_signalled(fake: HttpFake, more: Callable[[JSON], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; first print the connection details as one JSON line
    (`more` may add to them: a file it wrote for the client)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with fake:
        info = fake.info()
        if more is not None:
            more(info)
        print(json.dumps(info), flush=True)
        stop.wait()

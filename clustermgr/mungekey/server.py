"""The munge key server: HTTPS on the head's address (`[slurm] munge_key_port`).

    POST /munge-key   body: the one-time token of the node's launch request
    200  the key (application/octet-stream)   403 "refused"   400 a malformed request

It answers only what grants.redeem allows: the peer's address a burst node cm-scale
launched, the token that node's launch request's, not redeemed from that address yet (by
either head: the database says), within the node's boot window. A refusal tells
the client nothing more than "refused"; the log says why, with the peer's address and the
request id, never the token. Every connection gets a deadline, so a client that stalls
holds one thread for at most CONNECTION_TIMEOUT_S, and at most MAX_CONNECTIONS are served at
once.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import ssl
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from clustermgr.config import Settings
from clustermgr.core.errors import ClusterMgrError
from clustermgr.db.database import Database
from clustermgr.mungekey.facts import PATH, head_host, server_url
from clustermgr.mungekey.grants import redeem
from clustermgr.mungekey.identity import ServerIdentity, ensure_identity

log = logging.getLogger("cm-scale.munge-key")
MAX_TOKEN_BYTES = 256
MAX_KEY_BYTES = 1 << 16
CONNECTION_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32  # more at once are closed unanswered: a flood cannot pile up threads


def boot_windows(settings: Settings) -> Callable[[str | None], float]:
    """A template's boot window (its boot_timeout_s); a template the config no longer has
    keeps the default one."""
    from clustermgr.config.providers import TemplateSettings

    windows = {t.name: float(t.boot_timeout_s) for t in settings.templates}
    default = float(TemplateSettings.model_fields["boot_timeout_s"].default)
    return lambda template: windows.get(template or "", default)


def plain_address(address: str) -> str:
    """An IPv4-mapped IPv6 peer (a dual-stack listener) as the IPv4 address it is."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(parsed)


class _Handler(BaseHTTPRequestHandler):
    server: KeyServer
    server_version = "clustermgr-munge-key"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """The base logs every request line to stderr; the server logs verdicts instead."""

    def do_GET(self) -> None:
        self._reply(405, b"POST the token\n")

    def do_POST(self) -> None:
        peer = plain_address(self.client_address[0])
        if self.path != PATH:
            self._reply(404, b"not found\n")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_TOKEN_BYTES:
            log.warning("munge key refused to %s: no token or one of the wrong size", peer)
            self._reply(400, b"refused\n")
            return
        token = self.rfile.read(length).decode("ascii", "replace").strip()
        self._reply(*self.server.answer(token, peer))

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


class KeyServer(ThreadingHTTPServer):
    """The TLS listener; `answer` decides, `serve_forever` (in a thread) serves."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        settings: Settings,
        database: Database,
        identity: ServerIdentity | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        hold: bool = True,
    ):
        self.settings = settings
        self.database = database
        self.hold = hold  # False: no database connection kept open between requests
        self.window_of = boot_windows(settings)
        self.clock = clock
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            self.identity = identity or ensure_identity(
                settings.daemon.state_dir, Path(settings.slurm.munge_key_path)
            )
            self.tls.load_cert_chain(self.identity.cert, self.identity.key)
        except (OSError, ssl.SSLError) as exc:  # not root, or a damaged certificate
            raise KeyServerError(f"munge key server: its certificate: {exc}") from None
        host = head_host(settings)
        try:
            infos = socket.getaddrinfo(host, settings.slurm.munge_key_port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise KeyServerError(f"munge key server: cannot resolve {host!r}: {exc}") from None
        family, bind = infos[0][0], infos[0][4]
        self.address_family = family
        try:
            super().__init__((str(bind[0]), int(bind[1])), _Handler)
        except OSError as exc:
            raise KeyServerError(
                f"munge key server on {host}:{settings.slurm.munge_key_port}: "
                f"{exc.strerror or exc} (set [slurm] munge_key_port to a free port)"
            ) from None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            log.warning("munge key server: too many connections; closed %s", client_address[0])
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """The TLS handshake in the connection's own thread, under its deadline."""
        request.settimeout(CONNECTION_TIMEOUT_S)
        try:
            tls = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            log.info("munge key server: TLS with %s failed: %s", client_address[0], exc)
            return
        try:
            _Handler(tls, client_address, self)
        except OSError as exc:
            log.info("munge key server: %s: %s", client_address[0], exc)
        finally:
            tls.close()

    def answer(self, token: str, peer: str) -> tuple[int, bytes]:
        try:
            key = read_key(Path(self.settings.slurm.munge_key_path))
        except OSError as exc:
            log.error("munge key for %s: cannot read it: %s", peer, exc)
            return 503, b"refused\n"
        try:
            verdict = redeem(self.database, key, token, peer, self.window_of, self.clock())
        except ClusterMgrError as exc:
            log.warning("munge key refused to %s: cannot check its token: %s", peer, exc)
            return 503, b"refused\n"
        finally:
            if not self.hold:  # a lone key server keeps no SQLite database (or WAL) open
                self.database.dispose()
        request = f" (request {verdict.request_id})" if verdict.request_id else ""
        if not verdict.granted:
            log.warning("munge key refused to %s%s: %s", peer, request, verdict.why)
            return 403, b"refused\n"
        log.info("munge key handed to %s%s", peer, request)
        return 200, key

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="munge-key", daemon=True)
        thread.start()
        log.info("munge key server on %s", server_url(self.settings, self.port))
        return thread


def read_key(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(MAX_KEY_BYTES)


class KeyServerError(ClusterMgrError):
    """The key server could not start (one line: where, and what to change)."""


def start_key_server(settings: Settings, database: Database) -> KeyServer | None:
    """The key server, serving in a thread; None (with one warning) when it cannot start:
    the daemon goes on, and nodes it launches cannot join until it can."""
    try:
        server = KeyServer(settings, database)
    except ClusterMgrError as exc:
        log.warning("%s; burst nodes cannot get the munge key", exc)
        return None
    server.start()
    return server


def serve_until_stopped(settings: Settings, database: Database) -> int:
    """`cm-scale --serve-munge-key`: only the key server, until SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _signum, _frame: stop.set())
    server = KeyServer(settings, database, hold=False)
    database.dispose()
    server.start()
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    return 0

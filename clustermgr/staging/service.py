"""The staging service: cmsub's and the transfer jobs' only way to the `transfers` rows.

It runs as threads of cm-scale (root, the database's owner). Two doors, one answer each:
- a UNIX stream socket on the head (`[staging] socket`, mode 0666: anyone may knock, and
  the kernel's SO_PEERCRED, not the client, says who knocked);
- optionally TCP (`[staging] listen`) for data movers and burst nodes: TLS with the munge
  key server's identity, proved to the client by a root MUNGE credential
  (clustermgr.staging.channel), then each request carrying a MUNGE credential bound to
  its body (clustermgr.staging.wire). A plain TCP client gets no answer.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import ssl
import stat
import struct
import threading
from pathlib import Path
from typing import Any

from clustermgr.config import Settings
from clustermgr.core.errors import ClusterMgrError
from clustermgr.db.database import Database
from clustermgr.staging import channel, wire
from clustermgr.staging.ledger import Ledger
from clustermgr.staging.wire import Caller, Refused

log = logging.getLogger(__name__)
CONNECTION_TIMEOUT_S = 30.0
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_of(sock: socket.socket) -> Caller:
    _pid, uid, gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return Caller(uid, gid, "peercred")


class _Handler(socketserver.StreamRequestHandler):
    server: _UnixServer | _TcpServer

    def handle(self) -> None:
        self.connection.settimeout(CONNECTION_TIMEOUT_S)
        try:
            answer: dict[str, Any] = {"ok": True, "result": self._serve()}
        except Refused as exc:
            answer = {"ok": False, "error": str(exc), "exit": 2}
        except ClusterMgrError as exc:
            answer = {"ok": False, "error": str(exc), "exit": exc.exit_code}
        except (OSError, TimeoutError) as exc:
            log.warning("staging request from %s: %s", self.client_address or "socket", exc)
            return
        except Exception:
            log.exception("staging request failed")
            answer = {"ok": False, "error": "the staging service failed (see its log)", "exit": 1}
        self.wfile.write(wire.encode(answer))

    def _serve(self) -> dict[str, Any]:
        service = self.server.service
        if isinstance(self.server, _UnixServer):
            caller = peer_of(self.connection)
        else:
            self.wfile.write(channel.proof(self.server.certificate))
            credential = self.rfile.readline(4097)
            body = self.rfile.readline(wire.MAX_LINE + 1)
            caller = wire.check_credential(credential.strip(), body, service.max_age_s)
            return service.answer(caller, wire.decode(body, "request"))
        return service.answer(
            caller, wire.decode(self.rfile.readline(wire.MAX_LINE + 1), "request")
        )


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, service: StagingService) -> None:
        self.service = service
        super().__init__(path, _Handler)


class _TcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], service: StagingService) -> None:
        self.service = service
        self.tls, self.certificate = service.tls
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """The handshake in the request's own thread (a slow client holds only it)."""
        request.settimeout(CONNECTION_TIMEOUT_S)
        try:
            tls = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ValueError) as exc:
            log.warning("staging request from %s refused: no TLS (%s)", client_address[0], exc)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()


class StagingService:
    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.ledger = Ledger(settings, database)
        self.socket_path = Path(settings.staging.socket)
        self.listen = settings.staging.listen
        self.max_age_s = settings.staging.credential_max_age_s
        self._servers: list[socketserver.BaseServer] = []
        self._threads: list[threading.Thread] = []
        self.tcp_port = 0
        self.tls: tuple[ssl.SSLContext, bytes]  # the TCP door's, set when it opens

    def answer(self, caller: Caller, request: dict[str, Any]) -> dict[str, Any]:
        result = self.ledger.handle(caller, request)
        log.info("staging: %s by uid %d (%s)", request.get("op"), caller.uid, caller.how)
        return result

    def start(self) -> None:
        self._prepare_socket_path()
        unix = _UnixServer(str(self.socket_path), self)
        os.chmod(self.socket_path, 0o666)  # noqa: S103 (the kernel says who connects)
        self._serve(unix, "staging-socket")
        if self.listen:
            self.tls = channel.server_context(self.settings)
            host, _, port = self.listen.rpartition(":")
            tcp = _TcpServer((host, int(port)), self)
            self.tcp_port = tcp.server_address[1]
            self._serve(tcp, "staging-tcp")
        log.info(
            "staging service on %s%s",
            self.socket_path,
            f" and tcp {self.listen} (TLS, MUNGE)" if self.listen else "",
        )

    def _serve(self, server: socketserver.BaseServer, name: str) -> None:
        thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
        thread.start()
        self._servers.append(server)
        self._threads.append(thread)

    def _prepare_socket_path(self) -> None:
        parent = self.socket_path.parent
        if not parent.exists():
            parent.mkdir(mode=0o755, parents=True)
        info = os.lstat(parent)
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o022:
            raise ClusterMgrError(
                f"[staging] socket: {parent} must be owned by uid {os.geteuid()} and writable "
                "by no one else (someone could replace the socket)"
            )
        try:
            existing = os.lstat(self.socket_path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(existing.st_mode):
            raise ClusterMgrError(f"[staging] socket: {self.socket_path} exists and is no socket")
        self.socket_path.unlink()

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()
        if self.socket_path.is_socket():
            self.socket_path.unlink()


def start_if_configured(settings: Settings, database: Database) -> StagingService | None:
    """cm-scale's staging service when [[staging.regions]] are configured; a failure to
    open its socket is logged and leaves scaling running."""
    if not settings.staging.regions:
        return None
    service = StagingService(settings, database)
    try:
        service.start()
    except (OSError, ClusterMgrError) as exc:
        log.error("staging service not started: %s (cmsub cannot submit)", exc)
        service.stop()
        return None
    return service

"""The staging service: cmsub's and the transfer jobs' only way to the `transfers` rows.

It runs as threads of cm-scale (root, the database's owner). Two doors, one answer each:
- a UNIX stream socket on the head (`[staging] socket`, mode 0666: anyone may knock, and
  the kernel's SO_PEERCRED, not the client, says who knocked);
- optionally TCP (`[staging] listen`) for data movers and burst nodes: TLS with the munge
  key server's identity, proved to the client by a root MUNGE credential
  (clustermgr.staging.channel), then each request carrying a MUNGE credential bound to
  its body (clustermgr.staging.wire). A plain TCP client gets no answer.
Who may hold a connection, and for how long: clustermgr.staging.admission.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import socketserver
import ssl
import stat
import struct
import threading
import time
from pathlib import Path
from typing import Any

from clustermgr.config import Settings
from clustermgr.core.errors import ClusterMgrError
from clustermgr.db.database import Database
from clustermgr.staging import channel, wire
from clustermgr.staging.admission import Gate, Limits
from clustermgr.staging.ledger import Ledger
from clustermgr.staging.wire import Caller, Refused

log = logging.getLogger(__name__)
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
CREDENTIAL_LINE = 4097
ACCEPT_PAUSE_S = 0.1


def peer_of(sock: socket.socket) -> Caller:
    _pid, uid, gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return Caller(uid, gid, "peercred")


def caller_of(sock: socket.socket, address: Any) -> str:
    """Who the gate counts a connection against: the uid on the UNIX socket, the address
    over TCP (where the uid is known only once its request has been read)."""
    if sock.family == socket.AF_UNIX:
        return f"uid {peer_of(sock).uid}"
    return str(address[0])


class _Hungup(Exception):
    """The client closed its connection before sending a byte."""


class _DeadlineReader:
    """Lines of one request, all of which must arrive before one deadline (a client that
    trickles a byte every few seconds is cut off at the deadline, not kept by each read)."""

    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        self.sock = sock
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.buffer = b""

    def peek(self) -> bytes:
        """The first bytes of the request (b"" when the client hung up without any)."""
        if not self.buffer:
            self._receive()
        return self.buffer

    def _receive(self) -> bool:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no whole request within {self.timeout_s:g} s")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise TimeoutError(f"no whole request within {self.timeout_s:g} s") from None
        self.buffer += chunk
        return bool(chunk)

    def readline(self, limit: int) -> bytes:
        """Up to and with the next newline, at most `limit` bytes (less only at EOF)."""
        while b"\n" not in self.buffer[:limit] and len(self.buffer) < limit:
            if not self._receive():
                break
        end = self.buffer.find(b"\n", 0, limit)
        cut = end + 1 if end >= 0 else min(limit, len(self.buffer))
        line, self.buffer = self.buffer[:cut], self.buffer[cut:]
        return line


class _Handler(socketserver.BaseRequestHandler):
    server: _UnixServer | _TcpServer
    client_address: str  # the caller as the gate counts it (`uid N` or an address)
    request: socket.socket

    def handle(self) -> None:
        limits = self.server.gate.limits
        try:
            answer: dict[str, Any] = {"ok": True, "result": self._serve(limits.request_timeout_s)}
        except Refused as exc:
            answer = {"ok": False, "error": str(exc), "exit": 2}
        except ClusterMgrError as exc:
            answer = {"ok": False, "error": str(exc), "exit": exc.exit_code}
        except _Hungup:
            return  # connected and closed: nothing to answer, nothing worth a line
        except OSError as exc:  # the deadline passed (TimeoutError), a reset connection
            self.server.gate.dropped(self.client_address, str(exc))
            return
        except Exception:
            log.exception("staging request failed")
            answer = {"ok": False, "error": "the staging service failed (see its log)", "exit": 1}
        self.request.settimeout(limits.request_timeout_s)
        try:
            self.request.sendall(wire.encode(answer))
        except OSError as exc:
            self.server.gate.dropped(self.client_address, f"the answer not sent: {exc}")

    def _serve(self, timeout_s: float) -> dict[str, Any]:
        service = self.server.service
        reader = _DeadlineReader(self.request, timeout_s)
        if isinstance(self.server, _UnixServer):
            if not reader.peek():
                raise _Hungup
            body = reader.readline(wire.MAX_LINE + 1)
            return service.answer(peer_of(self.request), wire.decode(body, "request"))
        self.request.settimeout(timeout_s)
        self.request.sendall(channel.proof(self.server.certificate))  # the client waits for it
        if not reader.peek():
            raise _Hungup
        credential = reader.readline(CREDENTIAL_LINE)
        body = reader.readline(wire.MAX_LINE + 1)
        caller = wire.check_credential(credential.strip(), body, service.max_age_s)
        return service.answer(caller, wire.decode(body, "request"))


class _GatedServer(socketserver.ThreadingMixIn, socketserver.BaseServer):
    """One thread per admitted connection; the gate refuses the others at once, in the
    accepting thread, with one answer line the caller can print."""

    daemon_threads = True
    gate: Gate

    def get_request(self) -> tuple[Any, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # the process is out: let the
                time.sleep(ACCEPT_PAUSE_S)  # queue wait rather than spin on accept
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            caller = caller_of(request, client_address)
        except OSError:
            self.shutdown_request(request)
            return
        refusal = self.gate.admit(caller)
        if refusal is not None and request.family != socket.AF_UNIX:
            self.shutdown_request(request)  # the TCP door speaks TLS only: just closed
            return
        if refusal is not None:
            answer = {
                "ok": False,
                "busy": True,  # the client asks again, backing off
                "error": f"the staging service is busy: {refusal}",
                "exit": 1,
            }
            with contextlib.suppress(OSError):  # a full buffer or a gone client: just close
                request.send(wire.encode(answer), socket.MSG_DONTWAIT)
            self.shutdown_request(request)
            return
        thread = threading.Thread(
            target=self._serve_admitted, args=(request, caller), name="staging-request"
        )
        thread.daemon = True
        try:
            thread.start()
        except BaseException:
            self.gate.release(caller)
            self.shutdown_request(request)
            raise

    def _serve_admitted(self, request: Any, caller: str) -> None:
        try:
            self.process_request_thread(request, caller)
        finally:
            self.gate.release(caller)


class _UnixServer(_GatedServer, socketserver.UnixStreamServer):
    def __init__(self, path: str, service: StagingService) -> None:
        self.service = service
        self.gate = service.gate
        self.request_queue_size = service.gate.limits.backlog
        super().__init__(path, _Handler)


class _TcpServer(_GatedServer, socketserver.TCPServer):
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], service: StagingService) -> None:
        self.service = service
        self.gate = service.gate
        self.tls, self.certificate = service.tls
        self.request_queue_size = service.gate.limits.backlog
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """The handshake in the request's own thread (a slow client holds only it)."""
        request.settimeout(self.gate.limits.request_timeout_s)
        try:
            tls = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ValueError) as exc:
            self.gate.dropped(client_address, f"no TLS ({exc})")
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
        self.gate = Gate(Limits.of(settings.staging))
        self._servers: list[socketserver.BaseServer] = []
        self._threads: list[threading.Thread] = []
        self.tcp_port = 0
        self.tls: tuple[ssl.SSLContext, bytes]  # the TCP door's, set when it opens

    def answer(self, caller: Caller, request: dict[str, Any]) -> dict[str, Any]:
        result = self.ledger.handle(caller, request)
        log.info("staging: %s by uid %d (%s)", request.get("op"), caller.uid, caller.how)
        return result

    def start(self) -> None:
        for warning in self.gate.warnings():
            log.warning("%s", warning)
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

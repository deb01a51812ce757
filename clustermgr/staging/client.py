"""cmsub's and the transfer step's side of the staging channel (clustermgr.staging.service):
the UNIX socket when this host has it (the head), else the TCP door: TLS, the service's
MUNGE proof checked, then the request with the caller's MUNGE credential (channel.py).

A full listen queue on the socket is waited out, for CONNECT_PATIENCE_S at most: each
attempt waits in the kernel for a free place (SO_SNDTIMEO bounds a blocking AF_UNIX
connect), then backs off a little (TCP's own SYN retries do that over TCP). So is an
answer that the service is busy (its caps, clustermgr.staging.admission)."""

from __future__ import annotations

import random
import socket
import struct
import time
from pathlib import Path
from typing import Any

from clustermgr.config import StagingSettings
from clustermgr.core.errors import StagingError
from clustermgr.staging import channel, wire
from clustermgr.staging.wire import Refused

TIMEOUT_S = 120.0
CONNECT_PATIENCE_S = 30.0
CONNECT_WAIT_S = 1.0  # one attempt's wait in the kernel for a place in the queue
_TIMEVAL = struct.Struct("ll")
BUSY_CLOSED = "the staging service is busy (it closed the connection at once); try again later"


def call(staging: StagingSettings, op: str, **args: Any) -> dict[str, Any]:
    """The service's answer to one request; Refused (exit 2) or StagingError (exit 1).
    An answer that the service is busy (a cap reached) is asked again, backing off, until
    CONNECT_PATIENCE_S have passed."""
    body = wire.encode({"op": op, "args": args})
    give_up = time.monotonic() + CONNECT_PATIENCE_S
    pause = 0.05
    while True:
        answer = _exchange(staging, body, give_up)
        if not answer.get("busy") or time.monotonic() + pause >= give_up:
            break
        time.sleep(pause * random.uniform(0.5, 1.0))  # noqa: S311 (spreading, not secrets)
        pause = min(pause * 2, 1.0)
    if answer.get("ok"):
        result: dict[str, Any] = answer.get("result") or {}
        return result
    error = str(answer.get("error", "refused"))
    raise Refused(error) if answer.get("exit") == 2 else StagingError(error)


def _exchange(staging: StagingSettings, body: bytes, give_up: float) -> dict[str, Any]:
    path = staging.socket
    try:
        if path.is_socket():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                connect_waiting(sock, path, max(0.1, give_up - time.monotonic()))
                sock.settimeout(TIMEOUT_S)
                try:
                    sock.sendall(body)
                    line = channel.read_line(sock)
                except (BrokenPipeError, ConnectionResetError):
                    # a refusal at a cap answers `busy` and closes at once, maybe before
                    # the request was sent: asked again like any busy answer
                    return {"busy": True, "error": BUSY_CLOSED}
        elif staging.service:
            line = channel.call(staging.service, body, staging.credential_max_age_s, TIMEOUT_S)
        else:
            raise StagingError(
                f"the staging service is not reachable: no socket at {path} and no "
                "[staging] service address (is cm-scale running? ask your admin)"
            )
    except OSError as exc:
        raise StagingError(f"the staging service did not answer ({exc.strerror or exc})") from None
    if not line:
        raise StagingError("the staging service closed the connection without an answer")
    return wire.decode(line, "the staging service's answer")


def connect_waiting(
    sock: socket.socket, path: Path, patience_s: float = CONNECT_PATIENCE_S
) -> None:
    """Connect `sock` to the service's socket, waiting out a full listen queue (EAGAIN)
    for `patience_s`; any other failure is raised at once."""
    give_up = time.monotonic() + patience_s
    pause = 0.02
    sock.settimeout(None)  # blocking: the kernel queues the connect instead of EAGAIN
    while True:
        wait = max(0.01, min(CONNECT_WAIT_S, give_up - time.monotonic()))
        seconds = int(wait)
        sock.setsockopt(
            socket.SOL_SOCKET,
            socket.SO_SNDTIMEO,
            _TIMEVAL.pack(seconds, int((wait - seconds) * 1_000_000)),
        )
        try:
            sock.connect(str(path))
            break
        except BlockingIOError:
            if time.monotonic() + pause >= give_up:
                raise BlockingIOError(
                    f"its queue stayed full for {patience_s:g} s; try again later"
                ) from None
        time.sleep(pause * random.uniform(0.5, 1.0))  # noqa: S311 (spreading, not secrets)
        pause = min(pause * 2, 0.5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEVAL.pack(0, 0))

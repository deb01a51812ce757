"""cmsub's and the transfer step's side of the staging channel (clustermgr.staging.service):
the UNIX socket when this host has it (the head), else the TCP door: TLS, the service's
MUNGE proof checked, then the request with the caller's MUNGE credential (channel.py)."""

from __future__ import annotations

import socket
from typing import Any

from clustermgr.config import StagingSettings
from clustermgr.core.errors import StagingError
from clustermgr.staging import channel, wire
from clustermgr.staging.wire import Refused

TIMEOUT_S = 120.0


def call(staging: StagingSettings, op: str, **args: Any) -> dict[str, Any]:
    """The service's answer to one request; Refused (exit 2) or StagingError (exit 1)."""
    body = wire.encode({"op": op, "args": args})
    path = staging.socket
    try:
        if path.is_socket():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(TIMEOUT_S)
                sock.connect(str(path))
                sock.sendall(body)
                line = channel.read_line(sock)
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
    answer = wire.decode(line, "the staging service's answer")
    if answer.get("ok"):
        result: dict[str, Any] = answer.get("result") or {}
        return result
    error = str(answer.get("error", "refused"))
    raise Refused(error) if answer.get("exit") == 2 else StagingError(error)

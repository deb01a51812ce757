"""Start a service process of the control plane and stop it by pid.

Every process runs in its own session (process group), logs to a file in the control plane's
directory, and is stopped with SIGTERM to that group, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.services.processes import stop_group

STOP_GRACE_S = 10.0


class ServiceFailed(Exception):
    """A service of the control plane did not start; the message ends with its log's tail."""


@dataclass(frozen=True)
class Service:
    name: str
    pid: int
    log: Path

    def tail(self, size: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-size:]
        except OSError:
            return ""


def start(
    name: str,
    argv: Sequence[str],
    workdir: Path,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
) -> Service:
    log = workdir / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv), start_new_session=True, user=user, **_child(out, workdir, env)
        )
    return Service(name, proc.pid, log)


def _child(out: Any, workdir: Path, env: Mapping[str, str] | None) -> dict[str, Any]:
    """What every child of the plane gets: no stdin, output to its log, the plane's dir."""
    return {
        "stdin": subprocess.DEVNULL,
        "stdout": out,
        "stderr": subprocess.STDOUT,
        "cwd": workdir,
        "env": {**os.environ, **(env or {})},
    }


def alive(service: Service) -> bool:
    with contextlib.suppress(ChildProcessError):
        pid, _status = os.waitpid(service.pid, os.WNOHANG)
        if pid == service.pid:
            return False
    try:
        os.kill(service.pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(service: Service, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `ready` until it is true; the service dying or the time running out raise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(service):
            raise ServiceFailed(f"{service.name} exited before {what}:\n{service.tail()}")
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(0.2)
    raise ServiceFailed(f"{service.name}: no {what} in {timeout_s:.0f} s:\n{service.tail()}")


def port_open(port: int, host: str = "127.0.0.1") -> Callable[[], bool]:
    def check() -> bool:
        with socket.create_connection((host, port), 0.5):
            return True

    return check


def stop(service: Service) -> None:
    """SIGTERM to the service's process group, SIGKILL after STOP_GRACE_S; reaps the pid."""
    stop_group(service.pid, signal.SIGTERM, STOP_GRACE_S)


def run(
    argv: Sequence[str],
    workdir: Path,
    what: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 300,
) -> None:
    """A one-shot command (db sync, bootstrap); its output goes to the plane's log."""
    log = workdir / "setup.log"
    began = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"==> {what}\n".encode())
        out.flush()
        done = subprocess.run(
            list(argv), timeout=timeout_s, check=False, **_child(out, workdir, env)
        )
        out.write(f"<== {what}: {time.monotonic() - began:.1f} s\n".encode())
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise ServiceFailed(f"{what} failed ({done.returncode}):\n{tail}")

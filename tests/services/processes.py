"""Stopping a test service that runs in its own process group, by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import time


def stop_group(pid: int, first: signal.Signals, grace_s: float) -> None:
    """`first` to the group led by `pid`, SIGKILL if it is still there after `grace_s`; the
    leader is reaped (when it is our child)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, first)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)

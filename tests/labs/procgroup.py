"""Stopping a process the labs started in its own session (`start_new_session=True`)."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def stop_group(process: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM the process group if the leader is alive; SIGKILL it after `grace_s`."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

"""systemd's watchdog, fed while cm-scale's work makes progress, not merely while it lives.

A thread wakes every WatchdogSec/3 (systemd passes WatchdogSec as $WATCHDOG_USEC, and
$WATCHDOG_PID when the variables may reach other processes) and sends WATCHDOG=1 unless a
running cycle has made no progress (clustermgr/core/progress_marks.py) for longer than
[daemon] stall_timeout_s. Then it logs one line saying what stalled and for how long, and
sends nothing more; systemd restarts the daemon WatchdogSec after the last ping. A long
cycle whose calls keep returning is never stalled, however long it takes. Without a
watchdog from systemd the thread still watches, every stall limit/3, for the log line.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

from clustermgr.config import Settings
from clustermgr.core.kinds import kind_of
from clustermgr.core.progress_marks import PROGRESS, Progress, Stall
from clustermgr.runtime import sdnotify

log = logging.getLogger("cm-scale")


def watchdog_period(environ: Mapping[str, str], pid: int) -> float | None:
    """Seconds between pings systemd asks of this process (WatchdogSec/3), or None when the
    watchdog is off or meant for another process (sd_watchdog_enabled's rules)."""
    usec = environ.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    owner = environ.get("WATCHDOG_PID", "")
    if owner and (not owner.isdigit() or int(owner) != pid):
        return None
    return int(usec) / 1e6 / 3


class Watchdog:
    def __init__(
        self,
        stall_limit_s: float,
        period_s: float | None,
        progress: Progress = PROGRESS,
        ping: Callable[[], bool] = sdnotify.watchdog,
    ):
        self.stall_limit_s = stall_limit_s
        self.period_s = period_s  # None: systemd's watchdog is off; watch, do not ping
        self.progress = progress
        self.ping = ping
        self.stalled: Stall | None = None  # set while a stall holds back the pings
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)

    @classmethod
    def for_systemd(cls, stall_limit_s: float) -> Watchdog:
        return cls(stall_limit_s, watchdog_period(os.environ, os.getpid()))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def check(self) -> None:
        """One look: ping, or (once per stall) say why not."""
        stall = self.progress.stall(self.stall_limit_s)
        if stall is None:
            if self.stalled is not None:
                log.warning("%s made progress again; feeding the watchdog", self.stalled.activity)
                self.stalled = None
            if self.period_s is not None:
                self.ping()
            return
        if self.stalled is None:
            limit = f"[daemon] stall_timeout_s = {self.stall_limit_s:g}"
            then = (
                "systemd's watchdog restarts cm-scale"
                if self.period_s is not None
                else "no systemd watchdog is set to restart cm-scale"
            )
            log.error("%s > %s: watchdog pings stop; %s", stall.line(), limit, then)
            sdnotify.status(stall.line())
        self.stalled = stall

    def _watch(self) -> None:
        period = self.period_s if self.period_s is not None else self.stall_limit_s / 3
        self.check()
        while not self._stop.wait(period):
            self.check()


def stall_limit_warnings(settings: Settings) -> list[str]:
    """A stall limit a call may legitimately outlast makes the watchdog restart a daemon
    that was only waiting for an answer."""
    limit = settings.daemon.stall_timeout_s
    waits = {"[slurm] command_timeout_s": settings.slurm.command_timeout_s}
    for provider in settings.providers:
        wait = provider.option("api_timeout_s")
        if kind_of(provider.type).remote_api and isinstance(wait, (int, float)):
            waits[f"provider {provider.name}: api_timeout_s"] = wait
    return [
        f"[daemon] stall_timeout_s = {limit:g} is not above {what} = {wait:g}: a call that "
        "takes that long counts as a stall and systemd restarts cm-scale; raise it"
        for what, wait in waits.items()
        if wait >= limit
    ]

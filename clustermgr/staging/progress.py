"""Transfer progress: a rich bar when stdout is a terminal, plain log lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Protocol

from clustermgr.core.inputs import escape_controls
from clustermgr.core.logsafe import say


class Progress(Protocol):
    def begin(self, label: str, total_bytes: int) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def note(self, line: str) -> None: ...
    def end(self) -> None: ...


class Quiet:
    def begin(self, label: str, total_bytes: int) -> None:
        return None

    def advance(self, nbytes: int) -> None:
        return None

    def note(self, line: str) -> None:
        return None

    def end(self) -> None:
        return None


class PlainLines:
    """One line at the start, at most one every `every_s` while bytes move, one at the end."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self.total = self.done = 0
        self.label = ""
        self.last = 0.0

    def begin(self, label: str, total_bytes: int) -> None:
        self.label, self.total, self.done = label, total_bytes, 0
        self.last = time.monotonic()
        say(f"cmsub: {label}: {total_bytes:,} bytes", flush=True)

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        if time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            say(f"cmsub: {self.label}: {self.done:,} of {self.total:,} bytes", flush=True)

    def note(self, line: str) -> None:
        say(f"cmsub: {line}", flush=True)

    def end(self) -> None:
        return None


class Bar:
    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as RichProgress

        self.rich = RichProgress(
            "{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn()
        )
        self.task: int | None = None

    def begin(self, label: str, total_bytes: int) -> None:
        from rich.markup import escape

        self.rich.start()
        # rich reads a description as markup: a file name is text
        self.task = self.rich.add_task(escape(escape_controls(label)), total=total_bytes)

    def advance(self, nbytes: int) -> None:
        if self.task is not None:
            self.rich.advance(self.task, nbytes)  # type: ignore[arg-type]

    def note(self, line: str) -> None:
        from rich.text import Text

        self.rich.console.print(Text(escape_controls(f"cmsub: {line}")))

    def end(self) -> None:
        self.rich.stop()


def for_stdout() -> Progress:
    return Bar() if sys.stdout.isatty() else PlainLines()

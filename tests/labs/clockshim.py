"""A process's wall clock, stepped at will: tests/labs/clockshim.c, built with gcc and
preloaded into cm-scale, offsets CLOCK_REALTIME (not the monotonic clock) by the seconds in
a file the test writes, as an NTP step would move it. Test tooling, not shipped."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("clockshim.c")


class ClockShimUnavailable(RuntimeError):
    pass


@dataclass
class SteppedClock:
    library: Path
    offset_file: Path

    @property
    def env(self) -> dict[str, str]:
        return {"LD_PRELOAD": str(self.library), "CM_CLOCK_OFFSET_FILE": str(self.offset_file)}

    def step_to(self, offset_s: int) -> None:
        """The wall clock is now `offset_s` from the true time (read within 0.2 s)."""
        self.offset_file.write_text(f"{offset_s:+d}\n")


def build(workdir: Path) -> SteppedClock:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise ClockShimUnavailable("no C compiler (Debian package gcc) to build the clock shim")
    library = workdir / "clockshim.so"
    done = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(SOURCE), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ClockShimUnavailable(f"building the clock shim failed: {done.stderr.strip()}")
    clock = SteppedClock(library, workdir / "clock-offset")
    clock.step_to(0)
    return clock

"""Run a Python script with every thread under cProfile (plain `python -m cProfile` sees
only the main thread; cm-scale's cycles run in the scheduler's threads and the AWS
provider's tag calls in a pool): `python bench/_threadprof.py STATS SCRIPT [ARGS...]`
writes the merged stats to STATS when the script exits (SIGTERM: cm-scale stops cleanly)."""

from __future__ import annotations

import cProfile
import pstats
import runpy
import sys
import threading
from types import FrameType
from typing import Any

PROFILES: list[cProfile.Profile] = []
LOCK = threading.Lock()


def _profile_this_thread(_frame: FrameType, _event: str, _arg: Any) -> None:
    profile = cProfile.Profile()
    with LOCK:
        PROFILES.append(profile)
    profile.enable()  # replaces this hook for the thread


def main() -> None:
    stats_path, script = sys.argv[1], sys.argv[2]
    sys.argv = sys.argv[2:]
    threading.setprofile(_profile_this_thread)
    first = cProfile.Profile()
    PROFILES.append(first)
    first.enable()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        pass
    finally:
        first.disable()
        with LOCK:
            pstats.Stats(*PROFILES).dump_stats(stats_path)


if __name__ == "__main__":
    main()

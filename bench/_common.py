"""What the benches share: `--quick`, wall-clock medians, and the repository on sys.path.

Each bench is run as a script (`.venv/bin/python bench/bench_x.py`), so Python puts bench/
first on sys.path, not the repository: the labs and fakes (`tests.labs`, `tests.fakes`)
are importable only once the repository root is added here. Import this module first.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with `--quick`: seconds, tiny sizes, for the smoke test (no figure asserted)."""
    summary = (doc or "").strip().splitlines()[0] if doc else None
    result = argparse.ArgumentParser(description=summary)
    result.add_argument(
        "--quick", action="store_true", help="tiny sizes and few runs (the smoke test's mode)"
    )
    return result


def wall(argv: list[str], env: dict[str, str], timeout: float = 600) -> float:
    """Seconds one run of `argv` takes; a failing run stops the bench (exit 1)."""
    start = time.perf_counter()
    done = subprocess.run(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        fail(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode().strip()[-500:]}")
    return took


def median_wall(argv: list[str], env: dict[str, str], runs: int) -> float:
    return statistics.median(wall(argv, env) for _ in range(runs))


def fail(message: str) -> None:
    """The benchmarked code path failed: one line, exit 1."""
    print(f"bench: error: {message}", file=sys.stderr)
    raise SystemExit(1)

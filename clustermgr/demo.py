"""`make demo`: the main job, end to end, on this machine.

Today: create the SQLite database, load etc/clustermgr.toml.example, sync the nodes and
list them. Everything it writes lives under ./demo-state (removed on the next run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def clustermgr(*args: str, env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "clustermgr", *args]
    print(f"$ clustermgr {' '.join(args)}", flush=True)
    subprocess.run(argv, env=env, check=True, timeout=120)


def main() -> int:
    state = Path.cwd() / "demo-state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir()
    env = {
        **os.environ,
        "CLUSTERMGR_CONFIG": str(REPO / "etc" / "clustermgr.toml.example"),
        "CLUSTERMGR_DB": f"sqlite:///{state / 'clustermgr.db'}",
    }
    try:
        clustermgr("config", "check", env=env)
        clustermgr("db", "upgrade", env=env)
        clustermgr("nodes", "sync", "--no-slurm", env=env)
        clustermgr("templates", "list", env=env)
        clustermgr("nodes", "list", env=env)
    except subprocess.CalledProcessError as exc:
        print(f"demo: step failed with exit {exc.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

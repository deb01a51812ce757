"""Takeover time: two cm-scale daemons on one PostgreSQL, the leader killed with SIGKILL at a
random point of its cycle; the figure is the time from the kill to the standby's first
cycle as leader, in seconds and in cycle intervals (target: under two).

Each trial starts a fresh pair on the bench's own PostgreSQL server (Debian's binaries, a
throwaway data directory; needs root, as the tests do). The daemons have no Slurm to read
(`--skip-slurm-check`): a cycle is recorded all the same, which is what the standby's
first act is measured by. Prints trials, median and worst takeover, and any trial in which
both daemons acted after the kill (there must be none).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import fail, parser
from sqlalchemy import select

from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent
from tests.services import postgres

CONFIG = """
[cluster]
name = "takeover-{trial}"
[database]
url = "{db}"
[slurm]
bin_dir = "{tmp}/no-slurm"
[daemon]
interval_s = {interval}
reconcile_interval_s = 600
state_dir = "{state}"
metrics_port = 0
"""


def cycles_by(database: Database, source: str, since: float) -> list[float]:
    with database.session() as session:
        rows = session.scalars(
            select(ClusterEvent).where(ClusterEvent.kind == "cycle", ClusterEvent.source == source)
        )
        return sorted(r.at.timestamp() for r in rows if r.at.timestamp() >= since)


def source_of(pid: int) -> str:
    return f"cm-scale@{os.uname().nodename}:{pid}"


def wait_for(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def trial(number: int, url: str, tmp: Path, interval: float) -> tuple[float, bool]:
    """(seconds from the kill to the standby's first cycle, whether both acted after it)."""
    database = Database(url)
    procs = []
    try:
        for i in range(2):
            config = tmp / f"t{number}-{i}.toml"
            state = tmp / f"t{number}-state{i}"
            config.write_text(
                CONFIG.format(trial=number, db=url, tmp=tmp, interval=interval, state=state)
            )
            procs.append(
                subprocess.Popen(
                    [str(Path(sys.executable).with_name("cm-scale")), "--skip-slurm-check"],
                    env={**os.environ, "CLUSTERMGR_CONFIG": str(config)},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            if i == 0 and not wait_for(lambda: cycles_by(database, source_of(procs[0].pid), 0), 30):
                fail("the first daemon never became leader")
        leader, standby = procs
        time.sleep(interval * (1 + random.random()))  # somewhere in a cycle
        leader.send_signal(signal.SIGKILL)
        killed_at = time.time()
        leader.wait(10)
        if not wait_for(lambda: cycles_by(database, source_of(standby.pid), killed_at), 60):
            fail("the standby never took over")
        first = cycles_by(database, source_of(standby.pid), killed_at)[0]
        both = bool(cycles_by(database, source_of(leader.pid), killed_at + 0.5))
        return first - killed_at, both
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
        database.dispose()


def main() -> None:
    args = parser(__doc__).parse_args()
    if os.geteuid() != 0:
        fail("needs root: PostgreSQL runs as the postgres user")
    trials = 2 if args.quick else 10
    interval = 1.0 if args.quick else 5.0
    server = postgres.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            Database(server.url()).upgrade()
            results = [trial(n, server.url(), Path(tmp), interval) for n in range(trials)]
    finally:
        postgres.stop(server)
    takeovers = [seconds for seconds, _ in results]
    print(f"trials: {trials}, cycle interval: {interval:.0f} s")
    print(
        f"takeover (leader killed -> standby's first cycle): median "
        f"{statistics.median(takeovers):.2f} s ({statistics.median(takeovers) / interval:.2f} "
        f"cycles), worst {max(takeovers):.2f} s ({max(takeovers) / interval:.2f} cycles)"
    )
    print(f"trials in which the killed leader still acted: {sum(b for _, b in results)}")


if __name__ == "__main__":
    main()

"""Replay time of `clustermgr simulate`: the KTH-SP2 trace (28k jobs, budget 30 s) and the
METACENTRUM trace (100k jobs, budget 2 minutes for every baseline plus the default chain),
every strategy, on the shipped etc/simulate/cpu-cluster.toml. Prints seconds per strategy,
the total per trace and the figures it replayed. Traces are read in place from
../shared/data/traces (or --traces DIR); `--trace NAME` replays only that one.
`--cap N`: every provider's max_instances = N (a capped cloud pool: a long queue that the
decide step and the backfill pass walk every cycle; issue 25 measured METACENTRUM at 8).
`--quick`: a synthetic 2,000-job trace (the smoke test); no figure is asserted.
"""

from __future__ import annotations

import random
import tempfile
import time
import tomllib
from pathlib import Path

from _common import REPO, fail, parser

from clustermgr.config import Settings, parse_settings
from clustermgr.sim.strategies import replays, strategies
from clustermgr.sim.traces import read_trace

CONFIG = REPO / "etc" / "simulate" / "cpu-cluster.toml"
TRACES = {  # file -> (on-prem nodes, SWF processors per node), as in docs/simulation.md
    "KTH-SP2-1996-2.1-cln.swf.gz": (100, 1),
    "METACENTRUM-2009-2.swf.gz": (48, 8),
}


def synthetic(path: Path, jobs: int) -> Path:
    pick = random.Random(1)  # a repeatable workload, not a secret
    lines, at = [], 0
    for number in range(1, jobs + 1):
        at += pick.randint(0, 300)
        nodes, run = pick.choice([1, 1, 2, 4, 8]), pick.randint(60, 7200)
        lines.append(
            f"{number} {at} -1 {run} {nodes} -1 -1 {nodes} {run * 2} -1 1 1 1 -1 1 -1 -1 -1"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def settings_capped(cap: int | None) -> Settings:
    raw = tomllib.loads(CONFIG.read_text())
    if cap is not None:
        for provider in raw["providers"]:
            provider["max_instances"] = cap
    return parse_settings(raw)


def replay_all(trace_path: Path, onprem: int, procs_per_node: int, cap: int | None) -> None:
    settings = settings_capped(cap)
    trace = read_trace(trace_path, procs_per_node=procs_per_node)
    capped = f", cloud capped at {cap} instances" if cap is not None else ""
    print(f"{trace_path.name}: {len(trace.jobs):,} jobs, {onprem} on-prem nodes{capped}")
    started = time.perf_counter()
    chosen = strategies(settings, [], compare=True)
    for strategy, outcome, took in replays(settings, trace, chosen, onprem):
        figures = outcome.figures()
        wait_min = figures.wait_mean_s / 60
        print(
            f"  {strategy.name:<11} {took:6.1f} s   cost ${figures.cost:>12,.0f}   "
            f"paid/used {figures.paid_per_used or 0:5.3f}   mean wait {wait_min:8.1f} min"
        )
    print(f"  {'all':<11} {time.perf_counter() - started:6.1f} s")


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "traces")
    args.add_argument("--trace", choices=sorted(TRACES), help="replay only this trace")
    args.add_argument("--cap", type=int, help="every provider's max_instances (a capped pool)")
    options = args.parse_args()
    if options.cap is not None and options.cap < 0:
        fail(f"--cap {options.cap}: give a number of instances, 0 or more")
    if options.quick:
        with tempfile.TemporaryDirectory() as scratch:
            replay_all(synthetic(Path(scratch) / "synthetic.swf", 2000), 16, 1, options.cap)
        return
    for name, (onprem, procs_per_node) in TRACES.items():
        if options.trace not in (None, name):
            continue
        path = options.traces / name
        if not path.exists():
            fail(f"{path}: no such trace (pass --traces DIR)")
        replay_all(path, onprem, procs_per_node, options.cap)


if __name__ == "__main__":
    main()

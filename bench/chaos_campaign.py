"""The crash campaign (issue 9, item 2): per cloud, bursts and scale-downs through cm-scale
killed with SIGKILL at seeded points, each restarted for one reconcile cycle and checked:
cloud instances == the instances the database holds, no duplicate per node name, no
orphan, no lost node (tests/labs/chaoslab.py says what a trial does, chaoscheck.py what it
checks). Prints one line per trial, then per cloud: trials, duplicates, orphans, lost
nodes, points never reached, restarted cycles that failed, and the time per trial.

    .venv/bin/python bench/chaos_campaign.py              # 200 nodes, 20 trials per cloud
    .venv/bin/python bench/chaos_campaign.py --quick      # aws, 6 nodes, 1 trial (smoke)
    .venv/bin/python bench/chaos_campaign.py --clouds azure,local --trials 5 --json
    .venv/bin/python bench/chaos_campaign.py --clouds aws,azure,openstack --job-nodes 4
        # all-or-nothing jobs of 4 nodes: kills at every step of their launches, capacity
        # free or scarce at restart; adds `partial sets` (a job with some of its instances)

Needs root (slurmctld, network namespaces). The local provider's instances are real slurmd
in namespaces, so its labs are small (--local-nodes, 4). Seeds run from --seed upwards;
the same seeds give the same points and parameters.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import fail, parser

from tests.labs.chaoscheck import KINDS
from tests.labs.chaoslab import CLOUDS, LabStuck, TrialResult, chaos_lab


@dataclass
class Figures:
    cloud: str
    nodes: int
    results: list[TrialResult] = field(default_factory=list)
    stuck: str = ""

    def row(self) -> dict[str, object]:
        tally = {kind: sum(r.counts()[kind] for r in self.results) for kind in KINDS}
        seconds = [r.seconds for r in self.results]
        return {
            "cloud": self.cloud,
            "nodes": self.nodes,
            "trials": len(self.results),
            "duplicates": tally["duplicate"],
            "orphans": tally["orphan"],
            "lost": tally["lost"],
            "partial": tally["partial"],
            "missed": sum(len(r.missed) for r in self.results),
            "restarts_failed": sum(len(r.errors) for r in self.results),
            "median_s": round(statistics.median(seconds), 1) if seconds else None,
            "worst_s": round(max(seconds), 1) if seconds else None,
            "points": sorted({p for r in self.results for p in _names(r)}),
            "stuck": self.stuck,
        }


def _names(result: TrialResult) -> list[str]:
    return [f"{phase}:{what.split(' ')[0]}" for phase, what in result.points.items()]


def run_cloud(
    cloud: str, nodes: int, trials: int, first_seed: int, root: Path, job_nodes: int = 0
) -> Figures:
    label = f"{cloud}-whole" if job_nodes else cloud
    figures = Figures(label, nodes)
    started = time.monotonic()
    try:
        with chaos_lab(cloud, root / label, nodes, job_nodes) as lab:
            print(f"{cloud}: lab up in {time.monotonic() - started:.1f} s", flush=True)
            for seed in range(first_seed, first_seed + trials):
                result = lab.trial(seed)
                figures.results.append(result)
                print(result.line(), flush=True)
                for phase, finding in result.findings:
                    print(f"    {phase}: {finding.line()}", flush=True)
    except LabStuck as exc:
        figures.stuck = str(exc).splitlines()[0]
        print(f"{cloud}: STUCK: {exc}", flush=True)
    return figures


def table(rows: list[dict[str, object]]) -> str:
    head = "| cloud | nodes | trials | duplicates | orphans | lost | partial sets | points missed "
    head += "| restarts failed | s/trial (median) | s/trial (worst) |"
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["cloud"], r["nodes"], r["trials"], r["duplicates"], r["orphans"], r["lost"]]
        cells += [r["partial"]]
        cells += [r["missed"], r["restarts_failed"], r["median_s"], r["worst_s"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    args_parser = parser(__doc__)
    args_parser.add_argument("--clouds", default=",".join(CLOUDS), help="comma-separated")
    args_parser.add_argument("--trials", type=int, default=20, help="per cloud")
    args_parser.add_argument("--nodes", type=int, default=200, help="burst size on the clouds")
    args_parser.add_argument("--local-nodes", type=int, default=4, help="burst size on local")
    args_parser.add_argument("--seed", type=int, default=0, help="the first trial's seed")
    args_parser.add_argument(
        "--job-nodes",
        type=int,
        default=0,
        help="clouds: jobs of this many nodes on an all-or-nothing template (the kills at "
        "every step of an all-or-nothing launch); 0: an array of one-node tasks",
    )
    args_parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args_parser.add_argument("--keep", action="store_true", help="keep the labs' directories")
    args = args_parser.parse_args()
    # stopped by a signal, the labs still stop everything they started (finally blocks);
    # SIGINT is ignored in a background job of a non-interactive shell unless restored
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.geteuid() != 0:
        fail("needs root: slurmctld, munged and network namespaces")
    clouds = ["aws"] if args.quick else [c for c in args.clouds.split(",") if c]
    unknown = [c for c in clouds if c not in CLOUDS]
    if unknown:
        fail(f"unknown cloud(s) {', '.join(unknown)} (known: {', '.join(CLOUDS)})")
    trials = 1 if args.quick else args.trials
    root = Path(tempfile.mkdtemp(prefix="cm-chaos-", dir="/tmp"))
    root.chmod(0o755)  # SlurmUser runs the hooks from the labs
    figures = []
    try:
        for cloud in clouds:
            nodes = args.local_nodes if cloud == "local" else args.nodes
            if args.quick:
                nodes = 6
            job_nodes = 0 if cloud == "local" else args.job_nodes
            figures.append(run_cloud(cloud, nodes, trials, args.seed, root, job_nodes))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    rows = [f.row() for f in figures]
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    stuck = [f"{f.cloud}: {f.stuck}" for f in figures if f.stuck]
    if stuck:
        print("bench: error: " + "; ".join(stuck), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()

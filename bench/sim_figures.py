"""Record, or compare, every strategy's figures of `clustermgr simulate --compare --json` on
each trace in ../shared/data/traces, capped and uncapped: a change to the simulator, the
decide step or the policies that is meant to be faster only must leave them identical.

    .venv/bin/python bench/sim_figures.py --out /tmp/after            # this tree
    .venv/bin/python bench/sim_figures.py --code /tmp/base --out /tmp/before
    .venv/bin/python bench/sim_figures.py --diff /tmp/before /tmp/after

`--code DIR` replays another tree's code (a `git archive` of a commit unpacked in DIR, with
its `policies/` copied to `DIR/clustermgr/policies`, the package the install maps it to):
DIR goes first on the replay's PYTHONPATH, so the editable install of this tree is not used.
Each case is one `clustermgr simulate` process; its JSON goes to OUT/NAME.json with every
`replay_s` removed (the one figure that may differ). `--only A,B` runs the named cases.
`--quick`: a synthetic 300-job trace recorded twice and compared (the smoke test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from _common import REPO, fail, parser
from bench_simulate import synthetic

SIM = REPO / "etc" / "simulate"
KTH = ("KTH-SP2-1996-2.1-cln.swf.gz", ["--onprem-nodes", "100"])
META = ("METACENTRUM-2009-2.swf.gz", ["--procs-per-node", "8", "--onprem-nodes", "48"])
ALIBABA = ("alibaba-gpu-v2023/openb_pod_list_default.csv", ["--onprem-nodes", "2"])
CAP = 8  # every provider's max_instances in a capped case (issue 25 measured METACENTRUM so)

# name -> (config, trace and its options, capped)
CASES: dict[str, tuple[str, tuple[str, list[str]], bool]] = {
    "kth": ("cpu-cluster.toml", KTH, False),
    "kth-cap": ("cpu-cluster.toml", KTH, True),
    "meta": ("cpu-cluster.toml", META, False),
    "meta-cap": ("cpu-cluster.toml", META, True),
    "alibaba": ("gpu-cluster.toml", ALIBABA, False),
    "alibaba-cap": ("gpu-cluster.toml", ALIBABA, True),
    "kth-spot": ("cpu-cluster-spot.toml", KTH, False),
    "meta-spot": ("cpu-cluster-spot.toml", META, False),
}


QUICK = {"synthetic-cap": ("cpu-cluster.toml", ("synthetic.swf", ["--onprem-nodes", "4"]), True)}


def without_replay_s(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_replay_s(v) for k, v in value.items() if k != "replay_s"}
    if isinstance(value, list):
        return [without_replay_s(v) for v in value]
    return value


def capped_config(config: Path, scratch: Path) -> Path:
    """`config` with every provider's max_instances = CAP, as TOML the CLI reads."""
    raw = tomllib.loads(config.read_text())
    lines = config.read_text().splitlines()
    if not raw.get("providers"):
        fail(f"{config}: no [[providers]] to cap")
    out = []
    for line in lines:
        out.append(line)
        if line.strip() == "[[providers]]":
            out.append(f"max_instances = {CAP}")
    path = scratch / f"capped-{config.name}"
    path.write_text("\n".join(out) + "\n")
    capped = tomllib.loads(path.read_text())
    if any(p.get("max_instances") != CAP for p in capped["providers"]):
        fail(f"{config}: could not cap every provider")
    return path


def run_case(name: str, traces: Path, out: Path, code: Path | None, scratch: Path) -> float:
    config_name, (trace, options), capped = CASES.get(name) or QUICK[name]
    config = SIM / config_name
    if capped:
        config = capped_config(config, scratch)
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    argv = [
        sys.executable,
        "-c",
        "from clustermgr.cli.main import main; main()",
        "simulate",
        "--config",
        str(config),
        "--trace",
        str(traces / trace),
        *options,
        "--compare",
        "--json",
    ]
    started = time.perf_counter()
    # not from this tree's root: `python -c` puts the working directory first on sys.path
    done = subprocess.run(argv, env=env, cwd=scratch, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        fail(f"{name}: exited {done.returncode}: {done.stderr.strip()[-500:]}")
    figures = without_replay_s(json.loads(done.stdout))
    (out / f"{name}.json").write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    return took


def differ(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.json")} | {p.name for p in after.glob("*.json")})
    differing = 0
    for name in names:
        left, right = before / name, after / name
        if not (left.exists() and right.exists()):
            print(f"{name}: only in {before if left.exists() else after}")
            differing += 1
        elif left.read_text() != right.read_text():
            print(f"{name}: figures differ (diff {left} {right})")
            differing += 1
        else:
            print(f"{name}: identical")
    return differing


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "data" / "traces")
    args.add_argument("--out", type=Path, help="directory for each case's figures")
    args.add_argument("--code", type=Path, help="replay this tree's code instead of the install")
    args.add_argument("--only", help="comma-separated case names: " + ", ".join(CASES))
    args.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    options = args.parse_args()
    if options.diff:
        raise SystemExit(1 if differ(*options.diff) else 0)
    if options.quick:  # the smoke test: a synthetic trace recorded twice, then compared
        with tempfile.TemporaryDirectory() as scratch:
            where = Path(scratch)
            synthetic(where / "synthetic.swf", 300)
            for side in ("one", "two"):
                (where / side).mkdir()
                run_case("synthetic-cap", where, where / side, options.code, where)
            raise SystemExit(1 if differ(where / "one", where / "two") else 0)
    if options.out is None:
        fail("give --out DIR (or --diff BEFORE AFTER)")
    names = options.only.split(",") if options.only else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        fail(f"--only: no case {', '.join(unknown)} (cases: {', '.join(CASES)})")
    if options.code is not None and not (options.code / "clustermgr" / "policies").is_dir():
        fail(f"--code {options.code}: no clustermgr/policies there (copy its policies/ in)")
    options.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            took = run_case(name, options.traces, options.out, options.code, Path(scratch))
            print(f"{name}: {took:.1f} s", flush=True)


if __name__ == "__main__":
    main()

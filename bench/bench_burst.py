"""A burst at scale, measured (issue 24 item 4): a real slurmctld with N cloud nodes and no
slurmd behind them (the crash campaign's cloud lab, tests/labs/chaoslab.py), the moto-based
AWS fake, and cm-scale run as the daemon (the installed entry point). J multi-node jobs of
N/J nodes each are submitted held and released at once; the figures run from that release
(the next cycle, at most one interval later, is the first to see the demand) to every node
launched, bound (its instance id recorded) and known to Slurm (its NodeAddr the instance's
address, powered up: Slurm's state no longer says powered down).

Prints: the wall time; cm-scale's own CPU time (utime+stime of its process, from /proc)
apart from its Slurm clients' (the children it waited for) and from the fake's (the CPU of
this process's other threads: moto serves in threads of the bench process; the bench's own
polling runs in the main thread and is not counted); AWS API calls per kind (the fake's
counter); Slurm client calls per kind (a counting wrapper of each client in cm-scale's
[slurm] bin_dir) and how many node names the scontrol updates carried; cycles.

Not a pass/fail test: exits 1 only when the burst does not complete (or the lab fails).

    .venv/bin/python bench/bench_burst.py                     # 5,000 nodes, 50 jobs
    .venv/bin/python bench/bench_burst.py --nodes 1000 --jobs 10
    .venv/bin/python bench/bench_burst.py --quick             # 200 nodes, 4 jobs

Needs root (slurmctld, the lab's bridge). CM_BURST_PROFILE=FILE runs cm-scale with every
thread under cProfile (bench/_threadprof.py; the stats written to FILE when it stops), for
finding hot spots.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from _common import fail, parser

from clustermgr.core.hostlists import expand
from tests.labs.chaoslab import cloud_options
from tests.labs.cloudlab import BIN, CLOUDS, CloudLab, LabOptions
from tests.labs.procgroup import stop_group

CLIENTS = ("scontrol", "squeue", "sinfo", "sbatch", "scancel", "sacct", "srun", "sacctmgr")
# One line per call: the client's name and its arguments (node names and job ids only; no
# secret passes through a Slurm client's argv). Appends of a line this short are atomic.
COUNTING_CLIENT = """#!/bin/sh
printf '%s\\n' "{name} $*" >> '{log}'
exec /usr/bin/{name} "$@"
"""
BURST_SUBNET, ZONE = "172.31.128.0/18", "us-east-1a"  # inside the lab's 172.31.0.0/16
CYCLE_LINE = re.compile(r"\bcycle: .*\((\d+\.\d+) s\)")


@contextlib.contextmanager
def aws_lab(workdir: Path, options: LabOptions) -> Iterator[CloudLab]:
    """tests/labs/cloudlab.py's AWS lab, its template launching into a /18 subnet of the
    default VPC (16,379 addresses): a default subnet is a /20 (4,091), too small for a
    5,000-node burst here as on EC2. CreateSubnet: https://docs.aws.amazon.com/AWSEC2/
    latest/APIReference/API_CreateSubnet.html (moto implements it)."""
    kind = CLOUDS["aws"]
    (workdir / "harness").mkdir()
    with kind.harness(workdir / "harness") as harness:
        client = harness.client()
        vpcs = client.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])
        subnet = client.create_subnet(
            VpcId=vpcs["Vpcs"][0]["VpcId"], CidrBlock=BURST_SUBNET, AvailabilityZone=ZONE
        )["Subnet"]["SubnetId"]
        wide = dataclasses.replace(options, templates=({"subnets": [subnet]},))
        lab = CloudLab(workdir, kind, harness, wide)
        try:
            yield lab.start()
        finally:
            lab.stop()


def counting_bin_dir(workdir: Path) -> tuple[Path, Path]:
    bin_dir = workdir / "slurm-bin"
    bin_dir.mkdir()
    log = workdir / "slurm-calls.log"
    log.touch(mode=0o644)
    for name in CLIENTS:
        path = bin_dir / name
        path.write_text(COUNTING_CLIENT.format(name=name, log=log))
        path.chmod(0o755)
    return bin_dir, log


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own utime+stime, its waited-for children's), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / tick, (cutime + cstime) / tick


def other_threads_cpu() -> float:
    """CPU seconds of this process's threads other than the calling one (the fake's)."""
    return time.process_time() - time.thread_time()


@dataclasses.dataclass
class Progress:
    bound: int = 0  # nodes whose row holds an instance id
    told: int = 0  # ...and which Slurm knows at that address, powered up

    def line(self, nodes: int) -> str:
        return f"bound {self.bound}/{nodes}, known to Slurm {self.told}/{nodes}"


def progress(lab: CloudLab, db_path: str, names: set[str]) -> Progress:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30) as db:
        rows = db.execute(
            "SELECT name, instance_id, private_address FROM nodes WHERE kind = 'cloud'"
        ).fetchall()
    bound = {name: address for name, iid, address in rows if name in names and iid and address}
    assert lab.slurm is not None
    out = lab.slurm.run("sinfo", "-N", "-h", "-o", "%N %o %T", timeout=120).stdout
    told = 0
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in bound:
            name, address, state = parts
            told += address == bound[name] and "POWERED_DOWN" not in state.upper()
    return Progress(len(bound), told)


def slurm_calls(log: Path, offset: int) -> tuple[Counter[str], int, int]:
    """Client calls per kind after `offset`, scontrol node updates and the node names
    they carried (a batch names many nodes in one hostlist)."""
    calls: Counter[str] = Counter()
    updates = names = 0
    with log.open("rb") as f:
        f.seek(offset)
        for raw in f:
            words = raw.decode(errors="replace").split()
            if not words:
                continue
            kind = words[0]
            if kind == "scontrol" and len(words) > 1:
                kind = f"scontrol {words[1]}"
                node = next((w for w in words if w.lower().startswith("nodename=")), None)
                if words[1] == "update" and node is not None:
                    updates += 1
                    names += len(expand(node.split("=", 1)[1]))
            calls[kind] += 1
    return calls, updates, names


def cycles_after(log: Path, offset: int) -> tuple[int, float]:
    count, seconds = 0, 0.0
    with log.open("rb") as f:
        f.seek(offset)
        for raw in f:
            found = CYCLE_LINE.search(raw.decode(errors="replace"))
            if found:
                count += 1
                seconds += float(found.group(1))
    return count, seconds


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def burst(workdir: Path, nodes: int, jobs: int, timeout_s: float) -> None:
    names = f"burst-[1-{nodes}]"
    workdir.mkdir(mode=0o755)
    bin_dir, calls_log = counting_bin_dir(workdir)
    options = dataclasses.replace(
        cloud_options("aws", names, bin_dir),
        # nodes never register: neither cm-scale nor Slurm may give up on them mid-burst
        boot_timeout_s=3000,
        slurm_conf=(*cloud_options("aws", names, bin_dir).slurm_conf, "ResumeTimeout=3600"),
    )
    started = time.monotonic()
    with aws_lab(workdir, options) as lab:
        assert lab.slurm is not None
        fake = getattr(lab.harness, "fake")  # noqa: B009
        print(f"lab up: slurmctld with {nodes} cloud nodes in {time.monotonic() - started:.1f} s")
        db_path = lab.db_url.removeprefix("sqlite:///")
        per_job = nodes // jobs
        ids = [
            lab.submit("--hold", "-N", str(per_job), "--exclusive", "--wrap", "sleep 600")
            for _ in range(jobs)
        ]
        profile = os.environ.get("CM_BURST_PROFILE")
        with run_daemon(lab, workdir / "cm-scale.log", profile) as daemon:
            wait_for_idle_cycle(lab, daemon.pid, workdir / "cm-scale.log")
            log_at, calls_at, api_at = size(workdir / "cm-scale.log"), size(calls_log), fake.calls()
            cpu_at, children_at = cpu_seconds(daemon.pid)
            fake_at = other_threads_cpu()
            t0 = time.monotonic()
            lab.slurm.run("scontrol", "release", ",".join(ids))
            wanted = set(expand(names)[: per_job * jobs])
            last = Progress()
            while True:
                if daemon.poll() is not None:
                    fail(f"cm-scale exited ({daemon.returncode}): {lab.tail()[-2000:]}")
                last = progress(lab, db_path, wanted)
                if last.told == len(wanted):
                    break
                if time.monotonic() - t0 > timeout_s:
                    fail(f"burst incomplete after {timeout_s:.0f} s: {last.line(len(wanted))}")
                time.sleep(0.5)
            took = time.monotonic() - t0
            cpu, children = cpu_seconds(daemon.pid)
            fake_cpu = other_threads_cpu() - fake_at
            api = Counter(fake.calls())
            api.subtract(api_at)
            if profile:  # cProfile's stats are written as the daemon stops (SIGTERM)
                os.kill(daemon.pid, signal.SIGTERM)
                daemon.wait(120)
        clients, updates, told_names = slurm_calls(calls_log, calls_at)
        cycles, cycle_s = cycles_after(workdir / "cm-scale.log", log_at)
        report(nodes, jobs, took, cpu - cpu_at, children - children_at, fake_cpu)
        launches = api["CreateFleet"] + api["RunInstances"]
        print(f"  cycles: {cycles} (their own durations: {cycle_s:.1f} s in all)")
        print(
            f"  AWS API calls: {dict(sorted((k, v) for k, v in api.items() if v))}; launch calls "
            f"{launches} (ceil(nodes/500) = {math.ceil(len(wanted) / 500)} per attempt)"
        )
        print(f"  Slurm client calls: {dict(sorted(clients.items()))}")
        print(f"  scontrol node updates: {updates}, naming {told_names} nodes in all")
        print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"all {len(wanted)} nodes launched, bound and known to Slurm")


@contextlib.contextmanager
def run_daemon(lab: CloudLab, log: Path, profile: str | None) -> Iterator[subprocess.Popen[bytes]]:
    """cm-scale as the service runs it (under cProfile when `profile` names a file), in its
    own process group; SIGTERM at the end if alive."""
    argv = [str(BIN / "cm-scale")]
    if profile:
        argv = [sys.executable, str(Path(__file__).with_name("_threadprof.py")), profile, *argv]
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv, env=lab.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        stop_group(process, 120)


def wait_for_idle_cycle(lab: CloudLab, pid: int, log: Path) -> None:
    """Until the daemon has run one full cycle (imports and start-up behind it)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if log.exists() and CYCLE_LINE.search(log.read_text(errors="replace")):
            return
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.2)
    fail(f"cm-scale ran no cycle within 120 s: {lab.tail()[-2000:]}")


def report(nodes: int, jobs: int, took: float, cpu: float, children: float, fake: float) -> None:
    print(f"burst of {nodes} nodes in {jobs} jobs of {nodes // jobs}:")
    print(f"  wall time, release to every node launched, bound and known to Slurm: {took:.1f} s")
    print(f"  cm-scale CPU (its own process): {cpu:.2f} s (budget <= 10 s for 5,000 nodes)")
    print(f"  cm-scale's Slurm clients' CPU (scontrol, squeue, sinfo it ran): {children:.2f} s")
    print(f"  the AWS fake's CPU (moto, in the bench's threads): {fake:.2f} s")


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--nodes", type=int, default=5000, help="cloud nodes [5000; quick: 200]")
    cli.add_argument("--jobs", type=int, default=50, help="multi-node jobs [50; quick: 4]")
    cli.add_argument("--timeout", type=float, default=1800, help="seconds the burst may take")
    cli.add_argument("--keep", action="store_true", help="keep the lab's directory")
    args = cli.parse_args()
    nodes, jobs = (200, 4) if args.quick else (args.nodes, args.jobs)
    if os.geteuid() != 0:
        fail("needs root: slurmctld, munged and the lab's bridge")
    if jobs < 1 or nodes < jobs:
        fail(f"--nodes {nodes} --jobs {jobs}: needs at least one node per job")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(tempfile.mkdtemp(prefix="cm-burst-", dir="/tmp"))
    root.chmod(0o755)  # SlurmUser runs the hooks from the lab
    try:
        burst(root / "lab", nodes, jobs, 120 if args.quick else args.timeout)
    finally:
        if args.keep:
            print(f"lab kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

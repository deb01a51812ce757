"""`make demo` (`python -m tests.labs.demo` from the repository root): the bursting demo,
end to end, on this machine (root, Debian 12).

A real slurmctld with a GPU cloud partition whose nodes are local-provider instances
(a slurmd in its own network namespace each), cm-scale running as a daemon, a burst of
jobs (single-node, 2-node, --gres=gpu:2): nodes burst, jobs complete, nodes scale back
down. Exit 0 only when every job COMPLETED, every burst node is idle~ again, and no
network namespace or slurmd the demo started is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import clustermgr
from tests.labs.burstlab import BurstLab, BurstLabSpec

JOB_TIMEOUT_S = 420
SCALE_DOWN_TIMEOUT_S = 300


def say(text: str) -> None:
    print(f"demo: {text}", flush=True)


def jobs_table(lab: BurstLab, jobs: dict[str, str]) -> str:
    states = [f"{name}={lab.job_field(job, 'JobState') or '?'}" for name, job in jobs.items()]
    return " ".join(states)


def nodes_table(lab: BurstLab) -> str:
    return " ".join(f"{n}:{s}" for n, s in sorted(lab.node_states().items()))


def submit(lab: BurstLab) -> dict[str, str]:
    jobs = {f"single{i}": lab.sbatch("--wrap", "sleep 5; hostname") for i in range(1, 5)}
    jobs["two-node"] = lab.sbatch("-N", "2", "--wrap", "srun hostname")
    jobs["gpu2"] = lab.sbatch("--gres=gpu:2", "--wrap", "echo GPUs: $CUDA_VISIBLE_DEVICES")
    return jobs


def wait(condition: object, timeout_s: float, show: object) -> bool:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        line = show()  # type: ignore[operator]
        if line != last:
            say(line)
            last = line
        if condition():  # type: ignore[operator]
            return True
        time.sleep(3)
    return False


def job_wait_seconds(lab: BurstLab, job: str) -> float | None:
    submit_at, start_at = lab.job_field(job, "SubmitTime"), lab.job_field(job, "StartTime")
    try:
        return (
            datetime.fromisoformat(start_at) - datetime.fromisoformat(submit_at)
        ).total_seconds()
    except ValueError:
        return None


def observe_instances(lab: BurstLab, seen: dict[str, int | None]) -> None:
    """Remember every local instance (id -> slurmd session pid) the demo ever had."""
    try:
        data = json.loads((lab.state_dir / "local" / "instances.json").read_text())
    except (OSError, ValueError):
        return
    for record in data.get("instances", []):
        seen.setdefault(str(record["instance_id"]), record.get("pid"))


def leftovers(seen: dict[str, int | None]) -> list[str]:
    """Namespaces or slurmd processes of the demo's instances that still exist."""
    from clustermgr.providers.local.net import netns_exists, netns_name

    left = [f"netns {netns_name(iid)}" for iid in seen if netns_exists(iid)]
    left += [f"pid {pid}" for pid in seen.values() if pid and Path(f"/proc/{pid}").exists()]
    return left


def hook_user() -> str:
    """SlurmUser for the demo: "slurm" when it can run this Python (the real set-up)."""
    probe = subprocess.run(
        ["runuser", "-u", "slurm", "--", sys.executable, "-c", "import clustermgr"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return "slurm" if probe.returncode == 0 else "root"


def main() -> int:
    if os.geteuid() != 0:
        say("run me as root (network namespaces, slurmctld)")
        return 2
    # which installation runs: the checkout's (make demo) or a wheel's (test_installed_wheel)
    say(f"clustermgr {clustermgr.__version__} from {Path(clustermgr.__file__).parent}")
    workdir = Path(tempfile.mkdtemp(prefix="clustermgr-demo-", dir="/tmp"))
    spec = BurstLabSpec(
        demand_mode="slurm",
        slurm_user=hook_user(),
        cluster="demo",
        subnet="10.213.9.0/24",
        serve_munge_key=False,  # the cm-scale daemon below serves the munge key itself
    )
    lab = BurstLab(workdir, spec)
    daemon: subprocess.Popen[bytes] | None = None
    seen: dict[str, int | None] = {}
    ok = False
    try:
        say(f"starting slurmctld and the local cloud in {workdir}")
        lab.start()
        say("slurm.conf for the cloud partition, as `clustermgr slurm conf` prints it:")
        print(lab.clustermgr("slurm", "conf").stdout, flush=True)
        log = (workdir / "cm-scale.log").open("wb")
        daemon = subprocess.Popen(
            [str(lab.bin_dir / "cm-scale")], stdout=log, stderr=subprocess.STDOUT, env=lab.env
        )
        say(f"cm-scale running as pid {daemon.pid} (log: {workdir / 'cm-scale.log'})")
        jobs = submit(lab)
        say(f"submitted {len(jobs)} jobs: {', '.join(f'{k}={v}' for k, v in jobs.items())}")

        def done() -> bool:
            observe_instances(lab, seen)
            return all(lab.job_field(j, "JobState") == "COMPLETED" for j in jobs.values())

        finished = wait(
            done, JOB_TIMEOUT_S, lambda: f"{jobs_table(lab, jobs)} | {nodes_table(lab)}"
        )
        say("all jobs COMPLETED" if finished else "jobs did not complete in time")

        def scaled_down() -> bool:
            return set(lab.node_states().values()) == {"idle~"} and lab.instances() == []

        down = finished and wait(scaled_down, SCALE_DOWN_TIMEOUT_S, lambda: nodes_table(lab))
        say("every burst node is idle~ again" if down else "nodes did not scale down in time")
        status = json.loads(lab.clustermgr("status", "--json", check=False).stdout)
        waits = {name: job_wait_seconds(lab, job) for name, job in jobs.items()}
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
        daemon = None
        say("summary (from `clustermgr status --json`):")
        say(f"  instances launched: {status['instances_launched']}")
        say(f"  estimated cost: ${status['cost_total']:.4f}")
        say(
            "  job waits (s): "
            + ", ".join(f"{k} {v:.0f}" for k, v in waits.items() if v is not None)
        )
        gpu_output = lab.job_output(jobs["gpu2"]).strip()
        say(f"  gpu2 job printed: {gpu_output!r}")
        ok = finished and down
    except Exception as exc:  # the demo reports and still cleans up
        say(f"failed: {type(exc).__name__}: {exc}")
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
        lab.stop()
    left = leftovers(seen)
    if left:
        say(f"left behind: {', '.join(left)}")
    say("PASS" if ok and not left else "FAIL")
    return 0 if ok and not left else 1


if __name__ == "__main__":
    sys.exit(main())

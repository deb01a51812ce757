"""What matters, visible (issue 34 item 8): a real cm-scale whose cycles fail says so at
ERROR and in `status` (failed cycles in a row and since start), `status --check` gives
monitoring one line and exit 1, `status` shows the configuration in effect and a reload it
refused, pending demand counts only jobs a cloud template fits, and `events --cluster`
hides the cycles that did nothing.

Slurm is the edge of the world here: its clients are missing at first (every cycle fails to
observe), then stand-ins appear that list a queue; the cloud is the AWS SDK over the moto
fake (tests/fakes), which no cycle launches on (the template's demand_mode is slurm).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.fakes.aws_fake import FakeAws
from tests.fakes.aws_harness import IMAGE, aws_env, fake_aws_env

BIN = Path(sys.executable).parent
INTERVAL_S = 1.0

CONFIG = """
[cluster]
name = "visible"
[database]
url = "sqlite:///{tmp}/cm.db"
[slurm]
bin_dir = "{tmp}/slurm-bin"
[[providers]]
name = "aws1"
type = "aws"
region = "{region}"
endpoint_url = "{url}"
retry_mode = "standard"
[[templates]]
name = "gpu"
provider = "aws1"
partition = "cloud"
nodes = "cloud[1-4]"
instance_types = ["g5.12xlarge"]
image = "{image}"
subnets = {subnets}
cpus = 8
memory_mb = 16000
gpus = 1
gpu_model = "a10g"
demand_mode = "slurm"
[daemon]
interval_s = {interval}
reconcile_interval_s = 600
catalog_refresh_s = 3600
state_dir = "{tmp}/state"
metrics_port = 0
"""


def pending_line(job_id: str, partition: str, tasks: str = "N/A") -> str:
    """One squeue pending line (PENDING_FIELDS, then the comment): a one-node job wanting
    one GPU; `tasks` an array's task range."""
    fields = [job_id, tasks, partition, "1", "1", "cpu=4,node=1", "gres:gpu:1", "", "N/A"]
    fields += ["(null)", "1:00:00", "2026-11-23T00:00:00", "N/A", "alice", "1", "Resources", ""]
    return "\t".join(fields)


def stand_in_slurm(bin_dir: Path, queue: list[str]) -> None:
    """sinfo and squeue answering a cluster with no node and `queue` pending."""
    (bin_dir / "pending.out").write_text("".join(f"{line}\n" for line in queue))
    scripts = {
        "sinfo": "#!/bin/sh\necho '{\"nodes\": []}'\n",
        "squeue": f'#!/bin/sh\ncase "$*" in *PENDING*) exec cat "{bin_dir}/pending.out";; esac\n',
        "scontrol": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


@dataclass
class Site:
    tmp: Path
    config: Path
    env: dict[str, str]
    log: Path
    daemon: subprocess.Popen[bytes] | None = None

    def cli(self, *args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "clustermgr"), "--config", str(config or self.config), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )

    def status(self) -> dict[str, Any]:
        done = self.cli("status", "--json")
        assert done.returncode in (0, 1), done.stderr
        shown: dict[str, Any] = json.loads(done.stdout)
        return shown

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def start(self) -> None:
        handle = self.log.open("ab")
        self.daemon = subprocess.Popen(
            [str(BIN / "cm-scale"), "--skip-slurm-check", "--config", str(self.config)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        handle.close()

    def stop(self) -> None:
        if self.daemon is None or self.daemon.poll() is not None:
            return
        self.daemon.send_signal(signal.SIGTERM)
        try:
            self.daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait(timeout=10)


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    fake = FakeAws().start()
    lab: Site | None = None
    try:
        env = {**os.environ, **fake_aws_env()}
        env.pop("CLUSTERMGR_DB", None)
        with aws_env(fake_aws_env()):
            client = boto3.client("ec2", region_name=fake.region, endpoint_url=fake.url)
            subnets = [s["SubnetId"] for s in client.describe_subnets()["Subnets"]][:1]
        (tmp_path / "slurm-bin").mkdir()
        config = tmp_path / "clustermgr.toml"
        config.write_text(
            CONFIG.format(
                tmp=tmp_path,
                region=fake.region,
                url=fake.url,
                image=IMAGE,
                subnets=json.dumps(subnets),
                interval=INTERVAL_S,
            )
        )
        lab = Site(tmp_path, config, env, tmp_path / "cm-scale.log")
        upgraded = lab.cli("db", "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr
        yield lab
    finally:
        if lab is not None:
            lab.stop()
        fake.stop()


def test_failing_cycles_are_errors_counted_in_status_and_check_says_which(site: Site) -> None:
    down = site.cli("status", "--check")
    assert down.returncode == 1, down
    assert down.stdout == "cm-scale: cm-scale is not running: no head has a heartbeat\n"

    site.start()  # no Slurm clients yet: every cycle fails to observe
    wait_for("three failed cycles", lambda: site.said().count("cycle failed: Slurm") >= 3)
    failed = [line for line in site.said().splitlines() if "cycle failed: Slurm" in line]
    assert all(
        " ERROR cm-scale: cycle: cycle failed: Slurm could not be read" in ln for ln in failed
    )
    assert "failed in a row" in failed[-1], failed[-1]

    check = site.cli("status", "--check")
    assert check.returncode == 1, check
    [line] = check.stdout.splitlines()
    assert line.startswith("cm-scale: the last cycle failed ("), line
    assert "in a row" in line and "cycle failed: Slurm could not be read" in line, line

    shown = site.status()
    leader = shown["daemon"]
    assert leader is not None and not shown["healthy"]
    assert leader["cycles_failed_in_row"] >= 2 and leader["cycles_failed"] >= 2
    assert shown["problem"].startswith("the last cycle failed")
    digest = hashlib.sha256(site.config.read_bytes()).hexdigest()[:16]
    assert leader["config"]["path"] == str(site.config)
    assert leader["config"]["digest"] == digest
    text = site.cli("status")
    assert text.returncode == 1  # as --check: the leader's cycles fail
    assert "failed cycles: " in text.stdout and " in a row, " in text.stdout, text.stdout
    assert f"config: {site.config} sha256:{digest}, loaded " in text.stdout, text.stdout

    # Slurm answers now: a queue with jobs a cloud template fits (two, one an array of 3
    # tasks) and jobs of a partition no cloud template serves (Slurm's own nodes)
    stand_in_slurm(
        site.tmp / "slurm-bin",
        [
            pending_line("11", "cloud"),
            pending_line("12", "cloud", tasks="1-3"),
            pending_line("21", "batch"),
            pending_line("22", "batch", tasks="1-5"),
        ],
    )
    wait_for("a good cycle", lambda: site.cli("status", "--check").returncode == 0)
    ok = site.cli("status", "--check")
    assert ok.stdout.startswith(f"cm-scale: ok: leader on {socket.gethostname()} pid "), ok
    shown = site.status()
    assert shown["healthy"] and shown["problem"] is None
    assert shown["daemon"]["cycles_failed_in_row"] == 0
    assert shown["daemon"]["cycles_failed"] >= 3
    assert (shown["pending_jobs"], shown["pending_gpus"]) == (4, 4)  # the batch jobs are not

    # a reload of a broken file is refused: status names it, the old config stays in effect
    good = site.config.read_text()
    readable = site.tmp / "cli.toml"
    readable.write_text(good)
    site.config.write_text("[cluster\n")
    assert site.daemon is not None
    site.daemon.send_signal(signal.SIGHUP)
    wait_for("the refusal", lambda: "reload refused" in site.said())
    done = site.cli("status", config=readable)
    assert done.returncode == 0, done
    assert f"config: {site.config} sha256:{digest}, loaded " in done.stdout, done.stdout
    [refused] = [ln for ln in done.stdout.splitlines() if ln.startswith("RELOAD REFUSED at ")]
    assert "reload refused, the running config kept:" in refused, refused
    as_json = json.loads(site.cli("status", "--json", config=readable).stdout)
    assert as_json["daemon"]["reload_refused"]["message"].startswith("reload refused")

    # a good reload: in effect, with its new digest, and the refusal no longer shown
    site.config.write_text(good.replace("reconcile_interval_s = 600", "reconcile_interval_s = 300"))
    site.daemon.send_signal(signal.SIGHUP)
    wait_for("the reload", lambda: "configuration reloaded" in site.said())
    new_digest = hashlib.sha256(site.config.read_bytes()).hexdigest()[:16]
    wait_for(
        "the new digest in status",
        lambda: site.status()["daemon"]["config"]["digest"] == new_digest,
        10,
    )
    assert "RELOAD REFUSED" not in site.cli("status").stdout
    # changed on disk, not reloaded: status says the file is not what runs
    site.config.write_text(good.replace("reconcile_interval_s = 600", "reconcile_interval_s = 200"))
    on_disk = hashlib.sha256(site.config.read_bytes()).hexdigest()[:16]
    shown_text = site.cli("status").stdout
    assert f"config: {site.config} sha256:{new_digest}, loaded " in shown_text, shown_text
    assert (
        f"config: the file has changed since it was loaded (now sha256:{on_disk}): reload "
        "cm-scale (SIGHUP) to apply it"
    ) in shown_text, shown_text

    # the cycles that did nothing are hidden from the cluster's events, and counted
    events = site.cli("events", "--cluster")
    assert events.returncode == 0, events.stderr
    assert "launched 0, stopped 0" not in events.stdout, events.stdout
    assert "cycle failed: Slurm could not be read" in events.stdout
    [note] = [ln for ln in events.stdout.splitlines() if "hidden (--all shows them)" in ln]
    hidden = int(note.split()[0])
    assert hidden >= 1 and "that launched and stopped nothing" in note, note
    everything = json.loads(site.cli("events", "--cluster", "--all", "--json").stdout)
    idle = [e for e in everything if e["kind"] == "cycle" and e["message"].startswith("launched 0")]
    assert len(idle) >= hidden
    as_list = site.cli("events", "--cluster", "--json")
    assert all(not e["message"].startswith("launched 0") for e in json.loads(as_list.stdout))
    assert "hidden (--all shows them)" in as_list.stderr

    site.stop()  # a clean stop: nobody leads
    stopped = site.cli("status", "--check")
    assert stopped.returncode == 1
    assert stopped.stdout.startswith("cm-scale: cm-scale is not running"), stopped.stdout
    assert "Traceback" not in site.said()


def test_policy_dry_run_with_nothing_pending_says_so(site: Site) -> None:
    stand_in_slurm(site.tmp / "slurm-bin", [])
    done = site.cli("policy", "dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "nothing pending: no plan (Slurm lists 0 nodes; cm-scale manages 0: 0 up, "
        "0 powered down, 0 other)\n"
    )
    assert json.loads(site.cli("policy", "dry-run", "--json").stdout) == []


def test_cmsub_status_without_staging_says_it_is_not_configured(site: Site) -> None:
    done = subprocess.run(
        [str(BIN / "cmsub"), "--status", "12"],
        capture_output=True,
        text=True,
        env={**site.env, "CLUSTERMGR_CONFIG": str(site.config)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done
    assert done.stderr == (
        "cmsub: staging is not configured on this cluster (no [staging] regions)\n"
    )
    assert "is cm-scale running" not in done.stderr

"""cm-scale as a site runs it, for the state-directory attacks (test_state_layout.py,
test_spool.py): started as root from the layout it makes itself, under a root-owned
directory others may traverse (as /var/lib), against the AWS SDK over the moto fake and
stand-in Slurm clients that list no job and no node.

Nothing here loosens a mode: the test process keeps root's usual umask 022 (looser than
the unit's 0077), so what the daemon makes is what it chose.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3

from tests.fakes.aws_fake import FakeAws
from tests.fakes.aws_harness import ACCESS_KEY, IMAGE, SECRET_KEY, aws_env

INTERVAL_S = 1.0
CYCLE_LINE = re.compile(r" INFO cm-scale: cycle: ")
BIN = Path(sys.executable).parent  # the hooks and CLIs of this installation

CONFIG = """
[cluster]
name = "sec"
[database]
url = "sqlite:///{state}/clustermgr.db"
[slurm]
bin_dir = "{slurm_bin}"
user = "{slurm_user}"
[[providers]]
name = "aws1"
type = "aws"
region = "{region}"
endpoint_url = "{url}"
retry_mode = "standard"
[[templates]]
name = "gpu"
provider = "aws1"
partition = "gpu"
nodes = "cloud[1-4]"
instance_types = ["g5.12xlarge"]
image = "{image}"
subnets = {subnets}
cpus = 2
memory_mb = 1000
demand_mode = "slurm"
[daemon]
interval_s = {interval}
reconcile_interval_s = 600
catalog_refresh_s = 3600
state_dir = "{state}"
admin_group = "{admin_group}"
heartbeat_stale_s = 3600
metrics_port = 0
"""


def stand_in_slurm(bin_dir: Path) -> None:
    """squeue and sinfo that answer an empty cluster (the edge of the world), readable and
    runnable by anyone (the hooks run as SlurmUser)."""
    bin_dir.mkdir(mode=0o755)
    scripts = {"sinfo": "#!/bin/sh\necho '{\"nodes\": []}'\n", "squeue": "#!/bin/sh\nexit 0\n"}
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


@dataclass
class StateLab:
    base: Path  # root-owned, 0711: others traverse it as they would /var/lib
    config: Path
    state: Path
    fake: FakeAws
    env: dict[str, str]
    log: Path
    daemon: subprocess.Popen[bytes] | None = None
    nofile: int | None = None  # cm-scale's RLIMIT_NOFILE (default: the test's own)

    @property
    def spool(self) -> Path:
        return self.state / "spool"

    @property
    def database(self) -> Path:
        return self.state / "clustermgr.db"

    def clustermgr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "clustermgr"), "--config", str(self.config), *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )

    def start(self) -> None:
        handle = self.log.open("ab")
        limit = ["prlimit", f"--nofile={self.nofile}", "--"] if self.nofile else []
        self.daemon = subprocess.Popen(
            [*limit, str(BIN / "cm-scale"), "--skip-slurm-check", "--config", str(self.config)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        handle.close()
        self.wait_for("the socket", lambda: (self.state / "cm-scale.sock").exists(), 30)
        self.wait_for("a first cycle", lambda: self.cycles() >= 1, 30)

    def stop(self) -> None:
        if self.daemon is None or self.daemon.poll() is not None:
            return
        self.daemon.send_signal(signal.SIGTERM)
        try:
            self.daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def cycles(self) -> int:
        return len(CYCLE_LINE.findall(self.output()))

    def wait_for(self, what: str, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            if self.daemon is not None and self.daemon.poll() is not None:
                raise AssertionError(
                    f"cm-scale exited ({self.daemon.returncode}) waiting for "
                    f"{what}:\n{self.output()[-3000:]}"
                )
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}:\n{self.output()[-3000:]}")

    def keeps_cycling(self, cycles: int = 2) -> None:
        """The daemon is alive and runs `cycles` more cycles within their intervals."""
        before = self.cycles()
        self.wait_for(
            f"{cycles} more cycles", lambda: self.cycles() >= before + cycles, 4 * cycles + 4
        )

    def cloud_changes(self) -> int:
        """Launches and terminations that reached the fake cloud."""
        calls = self.fake.calls()
        return sum(calls.get(a, 0) for a in ("CreateFleet", "RunInstances", "TerminateInstances"))


@contextlib.contextmanager
def state_lab(
    slurm_user: str, admin_group: str, extra_config: str = "", nofile: int | None = None
) -> Iterator[StateLab]:
    """cm-scale running on a fresh layout; `extra_config` is appended to its file, `nofile`
    sets its descriptor limit (soft and hard)."""
    base = Path(tempfile.mkdtemp(prefix="cmsec-state-", dir="/var/tmp"))
    base.chmod(0o711)  # as /var/lib: others traverse, never list
    fake = FakeAws().start()
    lab = None
    try:
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        env.pop("CLUSTERMGR_DB", None)
        with aws_env({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}):
            client = boto3.client("ec2", region_name=fake.region, endpoint_url=fake.url)
            subnets = [s["SubnetId"] for s in client.describe_subnets()["Subnets"]][:1]
        stand_in_slurm(base / "slurm-bin")
        state = base / "state"
        config = base / "clustermgr.toml"
        config.write_text(
            CONFIG.format(
                state=state,
                slurm_bin=base / "slurm-bin",
                slurm_user=slurm_user,
                region=fake.region,
                url=fake.url,
                image=IMAGE,
                subnets=json.dumps(subnets),
                interval=INTERVAL_S,
                admin_group=admin_group,
            )
            + extra_config.format(base=base)
        )
        config.chmod(0o644)  # no secret in it; the hooks (SlurmUser) read it
        env["CLUSTERMGR_CONFIG"] = str(config)
        lab = StateLab(base, config, state, fake, env, base / "cm-scale.log", nofile=nofile)
        upgraded = lab.clustermgr("db", "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr
        lab.start()
        yield lab
    finally:
        if lab is not None:
            lab.stop()
        fake.stop()
        shutil.rmtree(base, ignore_errors=True)


def mode_of(path: Path) -> tuple[int, int, int]:
    """(uid, gid, permission bits) without following a link."""
    info = path.lstat()
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)

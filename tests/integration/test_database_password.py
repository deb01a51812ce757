"""The database password apart from the config (issue 34 item 4): a PostgreSQL role with a
password, given only through `[database] password_file` (root 0600); the config file
root:slurm 0640 with no secret in it, read by the hooks as SlurmUser; a real slurmctld for
the cycle. Starts slurmctld: run under the shared lock (flock /tmp/cm-e2e.lock)."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.workload.hooks import read_requests, spool_writers
from tests.conftest import cannot_run
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab
from tests.services.postgres import PrivatePostgres, role_with_password

BIN = Path(sys.executable).parent
SLURM_USER = "slurm"
PASSWORD = "pw-" + uuid.uuid4().hex  # the role's; must never show in any output

CONFIG = """
[cluster]
name = "pwsite"
[database]
url = "{url}"
{password_line}
[slurm]
onprem_partitions = ["batch"]
[daemon]
state_dir = "{state}"
metrics_port = 0
[[providers]]
name = "local"
type = "local"
region = "here"
[[templates]]
name = "burst"
provider = "local"
partition = "cloud"
nodes = "cloud[1-4]"
instance_types = ["local.gpu2"]
image = "local"
cpus = 2
memory_mb = 1000
gpu_model = "fake"
gpus = 2
"""


@dataclass(frozen=True)
class Site:
    top: Path  # /etc/clustermgr's stand-in: every user may enter it
    config: Path
    password_file: Path
    url: str  # without the password
    env: dict[str, str]

    def write_config(self, password_line: str, url: str | None = None) -> None:
        self.config.write_text(
            CONFIG.format(url=url or self.url, password_line=password_line, state=self.top / "st")
        )
        os.chown(self.config, 0, grp.getgrnam(SLURM_USER).gr_gid)
        self.config.chmod(0o640)

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*argv], capture_output=True, text=True, env=self.env, timeout=120, check=False
        )
        assert PASSWORD not in done.stdout + done.stderr, argv
        return done

    def clustermgr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(str(BIN / "clustermgr"), "--config", str(self.config), *args)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    if os.geteuid() != 0:
        cannot_run("needs root to run slurmctld")
    groups = [
        NodeGroup("on[1-2]", cpus=2, memory_mb=1000, cloud=False, address="127.0.0.1"),
        NodeGroup("cloud[1-4]", cpus=2, memory_mb=1000, gpus=2, gpu_model="fake"),
    ]
    partitions = [Partition("batch", "on[1-2]", default=True), Partition("cloud", "cloud[1-4]")]
    hooks = {
        f"{kind.replace('-', '_')}_program": str(BIN / f"clustermgr-slurm-{kind}")
        for kind in ("resume", "suspend", "resume-fail")
    }
    with SlurmLab(tmp_path / "slurm", groups, partitions, resume_timeout=3600, **hooks) as running:
        yield running


@pytest.fixture
def site(postgres_server: PrivatePostgres, lab: SlurmLab) -> Iterator[Site]:
    top = Path(tempfile.mkdtemp(prefix="cm-pwsite-", dir="/tmp"))
    top.chmod(0o755)
    password_file = top / "db.password"
    password_file.write_text(PASSWORD + "\n")
    password_file.chmod(0o600)
    env = {**os.environ, **lab.env}
    env.pop("CLUSTERMGR_DB", None)
    try:
        with role_with_password(postgres_server, PASSWORD) as role:
            host, port = postgres_server.host, postgres_server.port
            url = f"postgresql+psycopg://{role}@{host}:{port}/{role}"
            site = Site(top, top / "clustermgr.toml", password_file, url, env)
            site.write_config(f'password_file = "{password_file}"')
            yield site
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_password_only_in_its_file_upgrade_cycle_and_check(site: Site) -> None:
    upgraded = site.clustermgr("db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert "schema upgraded" in upgraded.stdout
    cycle = site.run(str(BIN / "cm-scale"), "--config", str(site.config), "--once")
    assert cycle.returncode == 0, cycle.stderr
    assert "launched 0" in cycle.stdout
    checked = site.clustermgr("config", "check", "--no-slurm")
    assert checked.returncode == 0, checked.stderr
    assert "warning" not in checked.stderr, checked.stderr
    listed = site.clustermgr("nodes", "list", "--json")
    assert listed.returncode == 0, listed.stderr

    site.write_config("")  # the same URL without the file: the server asks for the password
    refused = site.clustermgr("db", "current")
    assert refused.returncode == 1 and "password" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1

    site.write_config(f'password_file = "{site.password_file}"')
    site.password_file.chmod(0o640)  # group-readable: refused before any connection
    exposed = site.clustermgr("db", "current")
    assert exposed.returncode == 2
    assert exposed.stderr.strip() == (
        f"clustermgr: error: [database] password_file {site.password_file} is readable by "
        f"group or others (mode 0640): chmod 600 {site.password_file}"
    )
    warned = site.clustermgr("config", "check", "--no-slurm")  # the same, as a warning
    assert warned.returncode == 0, warned.stderr
    assert f"readable by group or others (mode 0640): chmod 600 {site.password_file}" in (
        warned.stderr
    )


def test_the_hooks_read_the_config_as_slurm_user_and_never_the_password(site: Site) -> None:
    assert site.clustermgr("db", "upgrade").returncode == 0
    cycle = site.run(str(BIN / "cm-scale"), "--config", str(site.config), "--once")
    assert cycle.returncode == 0, cycle.stderr  # the state dir and a fresh heartbeat
    env = {"PATH": os.environ["PATH"], "CLUSTERMGR_CONFIG": str(site.config)}

    peek = as_slurm(["cat", str(site.password_file)], env)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr

    done = as_slurm([str(BIN / "clustermgr-slurm-resume"), "cloud1"], env)
    assert done.returncode == 0, done.stderr
    spool = site.top / "st" / "spool"
    requests = read_requests(spool, spool_writers(SLURM_USER))
    assert [(r.kind, r.nodes) for r in requests] == [("resume", ("cloud1",))]

    site.config.chmod(0o600)  # what `chmod 600` used to be the advice for
    os.chown(site.config, 0, 0)
    failed = as_slurm([str(BIN / "clustermgr-slurm-suspend"), "cloud2"], env)
    assert failed.returncode == 2 and "cannot read config: " in failed.stderr
    checked = site.clustermgr("config", "check", "--no-slurm")
    assert checked.returncode == 0, checked.stderr
    assert (
        f"warning: {site.config}: SlurmUser slurm cannot read it (mode 0600, owner root:root)"
        in checked.stderr
    ), checked.stderr
    assert f"chown root:slurm {site.config} && chmod 640 {site.config}" in checked.stderr


def test_a_password_in_the_url_gets_the_advice_to_move_it(site: Site) -> None:
    inline = site.url.replace("@", f":{PASSWORD}@", 1)
    site.write_config("", url=inline)
    checked = site.clustermgr("config", "check", "--no-slurm")
    assert checked.returncode == 0, checked.stderr
    warnings = checked.stderr.strip().splitlines()
    assert warnings == [
        f"warning: {site.config} holds the database password (database.url), and the hooks "
        "read this file as SlurmUser: put the password alone in /etc/clustermgr/db.password "
        "(root 0600), drop it from url and set [database] password_file = "
        '"/etc/clustermgr/db.password" (or password_credential, docs/security.md)'
    ]
    site.write_config(f'password_file = "{site.password_file}"', url=inline)
    both = site.clustermgr("config", "check", "--no-slurm")
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1, both.stderr
    assert "drop the password from the url" in both.stderr


def as_slurm(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", SLURM_USER, "--", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )

"""The database password kept apart from the config (docs/security.md, "The database
password"): an ordinary user cannot read it, and nothing she can run or look at prints it:
the config file (readable, no secret in it), every `clustermgr` verb and hook she may run
against that config, and the running cm-scale's command line and environment."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.security.conftest import Accounts, as_user
from tests.services.postgres import PrivatePostgres, role_with_password

BIN = Path(sys.executable).parent
PASSWORD = "pw-" + uuid.uuid4().hex

CONFIG = """
[cluster]
name = "pwsec"
[database]
url = "{url}"
password_file = "{password_file}"
[slurm]
bin_dir = "{top}/no-slurm"
[daemon]
state_dir = "{top}/state"
metrics_port = 0
interval_s = 1
lease_s = 3
"""


@dataclass(frozen=True)
class Head:
    config: Path
    password_file: Path
    role: str
    server: PrivatePostgres
    daemon: subprocess.Popen[bytes]
    log: Path

    def advisory_locks(self) -> int:
        """Advisory locks the role's sessions hold: the leader's session lock, on a
        connection of its own (runtime/leader.py AdvisoryLock), made with the password too."""
        with psycopg.connect(self.server.dsn(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND a.usename = %s",
                (self.role,),
            ).fetchone()
        return int(row[0]) if row else 0

    def leader(self) -> str | None:
        with psycopg.connect(self.server.dsn(self.role), autocommit=True) as conn:
            row = conn.execute("SELECT holder FROM leader_lease WHERE id = 1").fetchone()
        return str(row[0]) if row and row[0] else None


@pytest.fixture
def head(postgres_server: PrivatePostgres, accounts: Accounts) -> Iterator[Head]:
    """cm-scale as a site runs it: its config 0644 (no secret), the password root 0600."""
    top = Path(tempfile.mkdtemp(prefix="cmsec-pw-", dir="/tmp"))
    top.chmod(0o755)
    password_file = top / "db.password"
    password_file.write_text(PASSWORD + "\n")
    password_file.chmod(0o600)
    config = top / "clustermgr.toml"
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERMGR_DB"}
    daemon = None
    try:
        with role_with_password(postgres_server, PASSWORD) as role:
            host, port = postgres_server.host, postgres_server.port
            url = f"postgresql+psycopg://{role}@{host}:{port}/{role}"
            config.write_text(CONFIG.format(url=url, password_file=password_file, top=top))
            config.chmod(0o644)
            upgrade = [str(BIN / "clustermgr"), "--config", str(config), "db", "upgrade"]
            subprocess.run(upgrade, env=env, check=True, capture_output=True, timeout=120)
            log = top / "cm-scale.log"
            with log.open("ab") as out:
                daemon = subprocess.Popen(
                    [str(BIN / "cm-scale"), "--skip-slurm-check", "--config", str(config)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            running = Head(config, password_file, role, postgres_server, daemon, log)
            deadline = time.monotonic() + 30
            while running.leader() is None:
                assert daemon.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            yield running
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=10)
        shutil.rmtree(top, ignore_errors=True)


def test_a_user_cannot_read_the_database_password_nor_make_anything_print_it(
    head: Head, accounts: Accounts
) -> None:
    mallory = accounts.attacker.name
    env = {"CLUSTERMGR_CONFIG": str(head.config), "HOME": accounts.attacker.home}
    assert head.leader()  # cm-scale leads: it connected with the password from its file
    assert head.advisory_locks() == 1

    peek = as_user(mallory, ["cat", str(head.password_file)])
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
    config = as_user(mallory, ["cat", str(head.config)])
    assert config.returncode == 0 and "password_file" in config.stdout  # the config she reads

    pid = head.daemon.pid
    seen = [config.stdout]
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    for argv in (
        ["cat", f"/proc/{pid}/cmdline"],  # argv: everyone may read it
        ["cat", f"/proc/{pid}/environ"],
        [str(BIN / "clustermgr"), "config", "check", "--no-slurm", "--json"],
        [str(BIN / "clustermgr"), "db", "current", "--json"],
        [str(BIN / "clustermgr"), "--debug", "db", "current"],
        [str(BIN / "clustermgr"), "status", "--json"],
        [str(BIN / "clustermgr"), "nodes", "list", "--json"],
        [str(BIN / "clustermgr-slurm-resume"), "cloud1"],
        [str(BIN / "cm-scale"), "--once"],
    ):
        done = as_user(mallory, argv, env=env)
        seen.append(done.stdout + done.stderr)
        outputs[" ".join([Path(argv[0]).name, *argv[1:]])] = done
    assert not [text for text in seen if PASSWORD in text], seen
    cmdline = outputs[f"cat /proc/{pid}/cmdline"]
    assert cmdline.returncode == 0 and "cm-scale" in cmdline.stdout  # read, and clean
    environ = outputs[f"cat /proc/{pid}/environ"]
    assert environ.returncode != 0 and "Permission denied" in environ.stderr
    current = outputs["clustermgr --debug db current"]
    assert current.returncode == 2, current.stderr  # no database for her: her CLI says why
    denied = f"password_file {head.password_file}: cannot read: Permission denied"
    assert denied in current.stderr
    assert PASSWORD not in head.log.read_text()

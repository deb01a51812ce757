"""A private MariaDB for the control plane: its own data directory and UNIX socket (no TCP
port), run as Debian's `mysql` user, never the machine's own server."""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.services.openstack import procs

START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class PrivateMariaDB:
    service: procs.Service
    socket: Path

    def url(self, database: str) -> str:
        return f"mysql+pymysql://root@localhost/{database}?unix_socket={self.socket}"


def start(workdir: Path) -> PrivateMariaDB:
    home = workdir / "mariadb"
    data = home / "data"
    data.mkdir(parents=True, mode=0o700)
    owner = pwd.getpwnam("mysql")
    for path in (home, data):
        os.chown(path, owner.pw_uid, owner.pw_gid)
    procs.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--user=mysql",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        workdir,
        "mariadb-install-db",
    )
    sock = home / "mysqld.sock"
    service = procs.start(
        "mariadb",
        [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            "--user=mysql",
            f"--datadir={data}",
            f"--socket={sock}",
            f"--pid-file={home / 'mariadbd.pid'}",
            "--skip-networking",
            # throwaway data: no durability, so the services' schema migrations run fast
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-flush-method=nosync",
            "--innodb-doublewrite=0",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=64M",
            "--max-connections=500",
            "--character-set-server=utf8mb4",
        ],
        workdir,
    )
    db = PrivateMariaDB(service, sock)
    procs.wait_until(service, lambda: _answers(sock), START_TIMEOUT_S, "MariaDB socket")
    return db


def _answers(sock: Path) -> bool:
    done = subprocess.run(
        ["mariadb-admin", "--no-defaults", f"--socket={sock}", "-uroot", "ping"],
        capture_output=True,
        check=False,
        timeout=10,
    )
    return done.returncode == 0


def create_databases(db: PrivateMariaDB, names: list[str]) -> None:
    sql = "".join(f"CREATE DATABASE IF NOT EXISTS `{name}`;" for name in names)
    subprocess.run(
        ["mariadb", "--no-defaults", f"--socket={db.socket}", "-uroot", "-e", sql],
        check=True,
        capture_output=True,
        timeout=30,
    )

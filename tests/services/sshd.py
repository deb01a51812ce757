"""A throwaway OpenSSH server for the tests: Debian's `sshd` on a loopback port with its own
config, host key and authorized_keys under a temporary directory, in the foreground
(`-D -e`) and stopped by pid. It plays a cloud director that clustermgr reaches over ssh
(the munge key push, directors/keypush.py). Keys come from `ssh-keygen` (ed25519, no
passphrase), made for each test."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.labs.slurmlab import free_port

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
PRIVSEP_DIR = Path("/run/sshd")  # sshd refuses to start without it
START_TIMEOUT_S = 10.0

CONF = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {workdir}/sshd.pid
AuthorizedKeysFile {authorized_keys}
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
LogLevel ERROR
"""


class SshdUnavailable(Exception):
    """sshd cannot run here; the message says what is missing."""


def keygen(path: Path) -> Path:
    """A fresh ed25519 key pair at path (private) and path.pub."""
    path.unlink(missing_ok=True)
    Path(f"{path}.pub").unlink(missing_ok=True)
    argv = [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "clustermgr-test", "-f", str(path)]
    subprocess.run(argv, check=True, capture_output=True)
    return path


@dataclass
class Sshd:
    workdir: Path
    port: int
    host_key: Path
    client_key: Path  # the private key sshd accepts (for root)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def conf(self) -> Path:
        return self.workdir / "sshd_config"

    def write_config(self) -> None:
        authorized = self.workdir / "authorized_keys"
        authorized.write_text(Path(f"{self.client_key}.pub").read_text())
        authorized.chmod(0o600)
        self.conf.write_text(
            CONF.format(
                port=self.port,
                host_key=self.host_key,
                workdir=self.workdir,
                authorized_keys=authorized,
            )
        )

    def start(self) -> Sshd:
        self.write_config()
        self.proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(self.conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {err.strip()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def new_host_key(self) -> None:
        """A different host key (a changed machine at the same address): restart needed."""
        keygen(self.host_key)


def check_available() -> None:
    if os.geteuid() != 0:
        raise SshdUnavailable("the sshd fixture runs as root (it logs in as root)")
    for tool in (str(SSHD), SSH_KEYGEN, "ssh", "rsync"):
        if shutil.which(tool) is None:
            raise SshdUnavailable(f"{tool} not found (apt-get install openssh-server rsync)")


@contextlib.contextmanager
def running_sshd(workdir: Path) -> Iterator[Sshd]:
    check_available()
    workdir.mkdir(parents=True, exist_ok=True)
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    server = Sshd(workdir, free_port(), keygen(workdir / "host_ed25519"), keygen(workdir / "id"))
    server.start()
    try:
        yield server
    finally:
        server.stop()

"""An `rsync --daemon` on a loopback port, standing in for a cloud director's image server.

Started in the foreground (`--no-detach`) so its pid is ours; stopped by that pid. The
module is writable (a director receives the head's image tree into it) and runs as the
user who started it (root keeps uid 0 rather than rsync's default of nobody). With
`secrets`, the module is cmsub's per-user staging module exactly as the lab director
writes it (providers/local/director.py): `<root>/<user>`, chrooted, as the user, by the
passwords in `secrets` (the daemon must run as root).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from clustermgr.providers.local.director import DirectorBoot, staging_module_conf
from tests.labs.slurmlab import free_port

MODULE = "clustermgr-images"


class RsyncDaemon:
    def __init__(self, root: Path, module: str = MODULE, secrets: Path | None = None) -> None:
        self.root = root  # the module's directory (a director's images root)
        self.module = module
        self.secrets = secrets
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir = root.parent / f".rsyncd-{module}"

    @property
    def url(self) -> str:
        return f"rsync://127.0.0.1:{self.port}/{self.module}"

    def start(self, timeout: float = 10.0) -> RsyncDaemon:
        self.root.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = self.workdir / "rsyncd.conf"
        conf.write_text(
            f"port = {self.port}\n"
            "address = 127.0.0.1\n"
            "use chroot = no\n"
            # as a director's: without it every small message waits for a delayed ACK
            "socket options = TCP_NODELAY\n"
            f"log file = {self.workdir / 'rsyncd.log'}\n"
            + (self._staging_module() if self.secrets else self._plain_module())
        )
        self.proc = subprocess.Popen(
            ["rsync", "--daemon", "--no-detach", f"--config={conf}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"rsync --daemon exited {self.proc.returncode}: {err.strip()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"rsync --daemon did not listen on port {self.port} in {timeout} s")

    def _plain_module(self) -> str:
        return (
            f"[{self.module}]\n"
            f"    path = {self.root}\n"
            "    read only = no\n"
            "    numeric ids = yes\n"
            "    munge symlinks = no\n"  # a director serves the tree's symlinks as they are
            f"    uid = {os.getuid()}\n"
            f"    gid = {os.getgid()}\n"
        )

    def _staging_module(self) -> str:
        boot = DirectorBoot(
            suffix="",
            admin_dn="",
            password_file=Path(os.devnull),
            staging_root=self.root,
            rsyncd_secrets=self.secrets,
            staging_module=self.module,
        )
        return staging_module_conf(boot)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def __enter__(self) -> RsyncDaemon:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

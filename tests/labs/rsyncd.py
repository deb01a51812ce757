"""An `rsync --daemon` on a loopback port, standing in for a cloud director's image server.

Started in the foreground (`--no-detach`) so its pid is ours; stopped by that pid. With
`push_secrets`, the modules are the lab director's images (providers/local/director.py):
read only for anyone, plus `<module>-push`, writable for the push user by the password in
`push_secrets` (the head's replication); with `secrets`, cmsub's per-user staging module:
`<root>/<user>`, chrooted, as the user, by the passwords in `secrets`; with neither, one
bare writable module. The daemon runs as root, as a director's does.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from clustermgr.directors.push_auth import PUSH_USER, push_module
from clustermgr.providers.local.director import (
    DirectorBoot,
    image_modules_conf,
    staging_module_conf,
)
from tests.labs.slurmlab import free_port

MODULE = "clustermgr-images"


class RsyncDaemon:
    def __init__(
        self,
        root: Path,
        module: str = MODULE,
        secrets: Path | None = None,
        push_secrets: Path | None = None,
    ) -> None:
        self.root = root  # the module's directory (a director's images root)
        self.module = module
        self.secrets = secrets
        self.push_secrets = push_secrets
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
            f"uid = {os.getuid()}\ngid = {os.getgid()}\n"
            "numeric ids = yes\nmunge symlinks = no\n"
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
        if self.push_secrets is None:  # a bare writable module (a staging root, a bench)
            return f"[{self.module}]\n    path = {self.root}\n    read only = no\n"
        boot = DirectorBoot(
            suffix="",
            admin_dn="",
            password_file=Path(os.devnull),
            rsync_module=self.module,
            push_module=push_module(self.module),
            push_user=PUSH_USER,
            push_secrets=self.push_secrets,
        )
        return image_modules_conf(boot, self.root)

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

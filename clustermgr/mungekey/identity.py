"""The key server's TLS identity: a self-signed certificate kept in the root-only state
dir, and the SHA-256 pin of its public key that user-data carries, so a booting node talks
to this server and no other (`curl --pinnedpubkey`). No CA is involved: the pin is the
trust, and it travels in the user-data the cloud API (authenticated by the site's
credentials) hands to the instance.

Made once with `openssl` (argv, no shell) the first time it is needed; kept across restarts,
so nodes launched before a restart still verify the server after it.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from clustermgr.errors import ClusterMgrError

KEY_DIR = "munge-key"  # under [daemon] state_dir: 0700 root
CERT_FILE = "server.crt"
KEY_FILE = "server.key"
CERT_DAYS = 3650
OPENSSL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ServerIdentity:
    cert: Path
    key: Path
    pin: str  # "sha256//<base64 of the SHA-256 of the DER SubjectPublicKeyInfo>"


def key_dir(state_dir: Path) -> Path:
    """The root-only directory of the server's identity and the grants (made 0700)."""
    path = state_dir / KEY_DIR
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


@contextmanager
def locked(directory: Path, name: str) -> Iterator[None]:
    """An exclusive lock on `directory/name` (cm-scale's threads and a --once run)."""
    fd = os.open(directory / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_identity(state_dir: Path) -> ServerIdentity:
    """The server's certificate and key, made if missing; IdentityError when openssl is
    missing or fails (one line)."""
    directory = key_dir(state_dir)
    cert, key = directory / CERT_FILE, directory / KEY_FILE
    with locked(directory, "identity.lock"):
        if not (cert.is_file() and key.is_file()):
            _make(cert, key)
    return ServerIdentity(cert, key, pin_of(cert))


def _openssl(*args: str) -> str:
    binary = shutil.which("openssl") or "/usr/bin/openssl"
    try:
        done = subprocess.run(
            [binary, *args],
            capture_output=True,
            text=True,
            timeout=OPENSSL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IdentityError(f"munge key server: openssl {args[0]}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise IdentityError(f"munge key server: openssl {args[0]} failed: {last}")
    return done.stdout


def _make(cert: Path, key: Path) -> None:
    tmp_key, tmp_cert = key.with_suffix(".tmp-key"), cert.with_suffix(".tmp-crt")
    old_umask = os.umask(0o077)
    try:
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(tmp_key),
            "-out",
            str(tmp_cert),
            "-days",
            str(CERT_DAYS),
            "-subj",
            "/CN=clustermgr munge key server",
        )
    finally:
        os.umask(old_umask)
    os.chmod(tmp_key, 0o600)
    os.chmod(tmp_cert, 0o600)
    os.replace(tmp_key, key)
    os.replace(tmp_cert, cert)


def pin_of(cert: Path) -> str:
    """curl's --pinnedpubkey form of the certificate's public key."""
    pem = _openssl("x509", "-in", str(cert), "-pubkey", "-noout")
    body = "".join(line for line in pem.splitlines() if line and not line.startswith("-----"))
    der = base64.b64decode(body)
    return "sha256//" + base64.b64encode(hashlib.sha256(der).digest()).decode()


class IdentityError(ClusterMgrError):
    """The key server's certificate could not be made or read."""

"""The key server's TLS identity: a self-signed certificate kept in the root-only state
dir, and the SHA-256 pin of its public key that user-data carries, so a booting node talks
to this server and no other (`curl --pinnedpubkey`). No CA is involved: the pin is the
trust, and it travels in the user-data the cloud API (authenticated by the site's
credentials) hands to the instance.

The private key is derived from the munge key (HMAC-SHA256, a P-256 scalar): every head
node holds the same munge key, so every head serves with the same public key and a launch's
user-data is the same whichever head renders it, before or after a restart or a takeover.
A re-issued launch (same idempotency token) must carry the same user-data, or the cloud
refuses it (EC2: IdempotentParameterMismatch). Whoever could read the derived key already
holds the munge key. The certificate around it is made with `openssl` (argv, no shell).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from clustermgr.core.errors import ClusterMgrError

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


# P-256's group order: a private scalar is in [1, N - 1]
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
# SEC1 ECPrivateKey around a 32-byte scalar, curve prime256v1, public point left out
# (openssl computes it): SEQUENCE { INTEGER 1, OCTET STRING scalar, [0] OID }
SEC1_HEAD = bytes.fromhex("30310201010420")
SEC1_TAIL = bytes.fromhex("a00a06082a8648ce3d030107")


def derived(munge_key: bytes, purpose: str) -> bytes:
    """32 bytes derived from the munge key for one purpose (the server's key, a token)."""
    return hmac.new(
        munge_key, f"clustermgr munge-key server: {purpose}".encode(), "sha256"
    ).digest()


def private_key_pem(munge_key: bytes) -> bytes:
    scalar = int.from_bytes(derived(munge_key, "tls key"), "big") % (P256_ORDER - 1) + 1
    der = SEC1_HEAD + scalar.to_bytes(32, "big") + SEC1_TAIL
    body = base64.encodebytes(der).decode().replace("\n", "")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    pem = "-----BEGIN EC PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END EC PRIVATE KEY-----\n"
    return pem.encode()


def ensure_identity(state_dir: Path, munge_key_path: Path) -> ServerIdentity:
    """The server's key (derived from the munge key) and its certificate, (re)made when
    missing or when the munge key changed; IdentityError when the munge key cannot be read
    or openssl fails (one line)."""
    try:
        munge_key = munge_key_path.read_bytes()
    except OSError as exc:
        raise IdentityError(
            f"munge key server: cannot read the munge key {munge_key_path}: {exc.strerror}"
        ) from None
    wanted = private_key_pem(munge_key)
    directory = key_dir(state_dir)
    cert, key = directory / CERT_FILE, directory / KEY_FILE
    with locked(directory, "identity.lock"):
        current = key.read_bytes() if key.is_file() else b""
        if current != wanted or not cert.is_file():
            _make(cert, key, wanted)
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


def _make(cert: Path, key: Path, key_pem: bytes) -> None:
    tmp_key, tmp_cert = key.with_suffix(".tmp-key"), cert.with_suffix(".tmp-crt")
    old_umask = os.umask(0o077)
    try:
        fd = os.open(tmp_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key_pem)
        _openssl(
            "req",
            "-x509",
            "-key",
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

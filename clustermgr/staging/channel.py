"""The staging service's TCP door in TLS: an answer can carry a user's rsync password or
minted S3 keys, so nothing crosses the network in clear.

The service serves with the munge key server's TLS identity (clustermgr.mungekey.identity:
a key derived from the munge key, so every head has the same one; no CA). A client trusts
it through MUNGE, which it already uses to prove who it is: right after the handshake the
service sends one line, a MUNGE credential made as root whose payload is the SHA-256 of the
certificate it just presented (`munge -s`, the same form as a request's credential). The
client decodes it with `unmunge` and goes on only when munged says root made it, recently,
for exactly the certificate this connection negotiated; then it sends its own credential
and the request. Someone in the middle presents another certificate, and without the munge
key cannot make a root credential naming it: the client sends nothing. A plain TCP client
gets a failed handshake and no answer.
"""

from __future__ import annotations

import logging
import socket
import ssl
from pathlib import Path

from clustermgr.config import Settings
from clustermgr.core.errors import ClusterMgrError, StagingError
from clustermgr.mungekey.identity import IdentityError, ensure_identity
from clustermgr.staging import wire

log = logging.getLogger(__name__)
PROOF_PREFIX = b"MUNGE:"


def server_context(settings: Settings) -> tuple[ssl.SSLContext, bytes]:
    """The TCP door's TLS context and the DER certificate it presents (the munge key
    server's identity, made when missing); ClusterMgrError in one line when it cannot be."""
    try:
        identity = ensure_identity(settings.daemon.state_dir, Path(settings.slurm.munge_key_path))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(identity.cert, identity.key)
        der = ssl.PEM_cert_to_DER_cert(identity.cert.read_text())
    except (IdentityError, OSError, ssl.SSLError, ValueError) as exc:
        raise ClusterMgrError(f"[staging] listen: the TLS identity: {exc}") from None
    return context, der


def proof(certificate: bytes) -> bytes:
    """The service's first line: a root MUNGE credential for its certificate."""
    return wire.make_credential(certificate)


def check_proof(line: bytes, certificate: bytes, max_age_s: float, where: str) -> None:
    """StagingError unless `line` is a fresh MUNGE credential root made for `certificate`."""
    try:
        maker = wire.check_credential(line.strip(), certificate, max_age_s)
    except wire.Refused as exc:
        raise StagingError(f"the staging service at {where} did not prove itself: {exc}") from None
    if maker.uid != 0:
        raise StagingError(
            f"the staging service at {where} did not prove itself: its credential was made by "
            f"uid {maker.uid}, not root (not cm-scale: nothing sent)"
        )


def call(where: str, body: bytes, max_age_s: float, timeout_s: float) -> bytes:
    """One request over the TCP door, in TLS; the answer line."""
    host, _, port = where.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the MUNGE proof below is the check
    with (
        socket.create_connection((host, int(port)), timeout=timeout_s) as raw,
        context.wrap_socket(raw) as sock,
    ):
        first = read_line(sock)
        if not first.startswith(PROOF_PREFIX):
            return first  # the service's refusal (it could not make its proof)
        certificate = sock.getpeercert(binary_form=True)
        if certificate is None:
            raise StagingError(f"the staging service at {where} presented no certificate")
        check_proof(first, certificate, max_age_s, where)
        sock.sendall(wire.make_credential(body) + body)
        return read_line(sock)


def read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n") or size > wire.MAX_LINE:
            break
    return b"".join(chunks)

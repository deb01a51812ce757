"""Where a booting node finds the key server, and the facts a launch's user-data carries."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from clustermgr.config import Settings
from clustermgr.mungekey.grants import request_token
from clustermgr.mungekey.identity import IdentityError, ensure_identity
from clustermgr.nodes.bootstrap import KeyFetch

PATH = "/munge-key"


def head_host(settings: Settings) -> str:
    """The host part of the conf server (what every burst node reaches for slurmctld)."""
    server = settings.slurm.conf_server or settings.cluster.head_address
    if server.startswith("["):
        return server[1:].split("]", 1)[0]
    return server.rsplit(":", 1)[0] if server.count(":") == 1 else server


def server_url(settings: Settings, port: int | None = None) -> str:
    host = head_host(settings)
    shown = f"[{host}]" if ":" in host else host
    return f"https://{shown}:{port or settings.slurm.munge_key_port}{PATH}"


def launch_key_fetch(
    settings: Settings, request_id: str, count: int, window_s: float, now: datetime
) -> KeyFetch:
    """The one-time token of `request_id` (derived from the munge key, so the same on every
    head and every retry), the server's URL and pin: what the request's user-data carries
    (the token is a secret: never logged, never in argv or a row). Each of the request's
    `count` instances may redeem it once within `window_s` of its launch (the server judges
    both from the database: grants.redeem). IdentityError when the munge key cannot be read
    or the server's certificate cannot be written."""
    state_dir = settings.daemon.state_dir
    key_path = Path(settings.slurm.munge_key_path)
    try:
        pin = ensure_identity(state_dir, key_path).pin
        token = request_token(key_path.read_bytes(), request_id)
    except OSError as exc:  # not root, or the state dir unwritable
        raise IdentityError(
            f"munge key server identity in {state_dir}: {exc.strerror or exc} "
            "(cm-scale runs as root)"
        ) from None
    return KeyFetch(server_url(settings), pin, token)

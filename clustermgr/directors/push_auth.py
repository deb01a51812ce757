"""Who may write a director's copy of the images: the head, and no one else.

A director's rsync daemon serves the images twice (docs/directors.md, "The director's rsync
daemon"):
  - `[images] rsync_module`: read only, anonymous, chrooted, as `nobody`: what burst nodes
    pull (only world-readable files of the tree are served);
  - `<rsync_module>-push`: writable, as root (so owners and modes arrive as on the head),
    for the user `clustermgr` alone (`auth users = clustermgr:rw`), whose password the
    daemon checks against its `secrets file`.
Before this split, the one module was writable by anyone who could reach the director,
burst-node jobs included: a job could change what every burst node runs.

The push password is an HMAC of the munge key for this one purpose, so every head derives
the same one (a takeover changes nothing) and nothing more is kept. cm-scale writes the
`clustermgr:<password>` line to `[images] push_secrets` (root 0600, replaced atomically),
which the lab director's daemon reads; a cloud director's image bakes the same file
(`clustermgr images push-secrets FILE` writes it). rsync gets the password through
RSYNC_PASSWORD, never argv.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from clustermgr.config import Settings
from clustermgr.core.errors import ConfigError
from clustermgr.core.secret import Secret, is_private, write_private

PUSH_USER = "clustermgr"
PUSH_SUFFIX = "-push"
SECRETS_NAME = "images-push.secrets"


def push_module(module: str) -> str:
    """The writable module beside the read-only `module`."""
    return f"{module}{PUSH_SUFFIX}"


def secrets_path(settings: Settings) -> Path:
    return settings.images.push_secrets or settings.daemon.state_dir / SECRETS_NAME


def push_password(munge_key_path: Path) -> Secret:
    """The push password, derived from the munge key; ConfigError (one line) when the key
    cannot be read."""
    try:
        munge_key = munge_key_path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"image push password: cannot read the munge key {munge_key_path}: "
            f"{exc.strerror or exc} (cm-scale runs as root; [slurm] munge_key_path)"
        ) from None
    if not munge_key:
        raise ConfigError(f"image push password: the munge key {munge_key_path} is empty")
    digest = hmac.new(munge_key, b"clustermgr images: rsync daemon push", "sha256")
    return Secret(digest.hexdigest()[:40])


def secrets_line(password: Secret) -> bytes:
    return f"{PUSH_USER}:{password.reveal()}\n".encode()


def ensure_secrets_file(path: Path, password: Secret, what: str = "[images] push_secrets") -> None:
    """`path` holds the push user's line, root 0600 (rewritten only when it does not);
    ConfigError (one line) when it cannot be written safely."""
    wanted = secrets_line(password)
    try:
        if is_private(path) and path.read_bytes() == wanted:
            return
        write_private(path, wanted)
    except ValueError as exc:
        raise ConfigError(f"{what} {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror or exc}") from None


def credentials(settings: Settings) -> Secret:
    """The push password, with the secrets file the lab director reads made current."""
    password = push_password(Path(settings.slurm.munge_key_path))
    ensure_secrets_file(secrets_path(settings), password)
    return password

"""Per-user credentials for a director's rsync daemon staging module.

The director serves one static module, `[clustermgr-staging]`, whose path is
`<staging root>/%RSYNC_USER_NAME%`, chrooted, run as that user, `auth users = root:deny, *`,
checked against a `secrets file` (docs/staging.md, "The director's staging module"). A
user's password there is an HMAC of the staging key (derived from the munge key, which
every head holds) and the user's name, so the same on every head, after a restart and
after a takeover. The staging service writes `user:password` lines for the users who stage into
the region's `rsyncd_secrets` file (an atomic replace, root 0600) and hands a user their
own password only in the authenticated `begin` answer; the transfer job gives it to rsync
through RSYNC_PASSWORD (never argv, never logged, never a database row).

A daemon area's URL carries the user: `rsync://USER@HOST:PORT/MODULE/<stage_id>`, which
the daemon maps to `<staging root>/USER/<stage_id>`.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from clustermgr.core.errors import StagingError
from clustermgr.core.secret import is_private, write_private

PASSWORD_ENV = "RSYNC_PASSWORD"  # noqa: S105 (the variable's name, not a password)
# a user name the secrets file and the module's path can hold as is
USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_URL = re.compile(r"rsync://(?:[^@/]*@)?(?P<rest>[^/]+(?:/.*)?)")
_lock = threading.Lock()


def is_daemon_url(target: str) -> bool:
    return target.startswith("rsync://")


def with_user(url: str, user: str) -> str:
    """`rsync://HOST[:PORT]/MODULE[/PATH]` as `user` (a user already in it replaced)."""
    found = _URL.fullmatch(url)
    if found is None:
        raise StagingError(f"{url[:200]!r} is not an rsync:// URL")
    return f"rsync://{check_user(user)}@{found['rest']}"


def without_user(url: str) -> str:
    found = _URL.fullmatch(url) if is_daemon_url(url) else None
    return url if found is None else f"rsync://{found['rest']}"


def user_root(root: str, user: str) -> str:
    """Where `user`'s areas live: `<root>/<user>` for a directory; for a daemon's staging
    module the module itself, reached as the user (the daemon maps it to their directory)."""
    if is_daemon_url(root):
        return with_user(root.rstrip("/"), user)
    return f"{root.rstrip('/')}/{user}"


def check_user(user: str) -> str:
    if user == "root" or not USER_NAME.fullmatch(user):
        raise StagingError(
            f"user {user[:40]!r} cannot have a staging area on an rsync daemon (root never; "
            "a name of letters, digits, '_', '.', '-')"
        )
    return user


# --- the staging key and the passwords --------------------------------------------------


def staging_key(munge_key_path: Path) -> bytes:
    """The staging key: derived from the munge key (HMAC-SHA256 for this one purpose), so
    every head computes the same key, and users' passwords stay the same across a
    takeover, with nothing more to keep or copy. One line when the key cannot be read."""
    try:
        munge_key = munge_key_path.read_bytes()
    except OSError as exc:
        raise StagingError(
            f"users' rsync passwords: cannot read the munge key {munge_key_path}: "
            f"{exc.strerror or exc} (cm-scale runs as root; [slurm] munge_key_path)"
        ) from None
    if not munge_key:
        raise StagingError(f"users' rsync passwords: the munge key {munge_key_path} is empty")
    return hmac.new(munge_key, b"clustermgr staging: rsync daemon passwords", "sha256").digest()


def password(key: bytes, user: str) -> str:
    digest = hmac.new(key, f"clustermgr rsyncd: {check_user(user)}".encode(), hashlib.sha256)
    return digest.hexdigest()[:40]


# --- the secrets file --------------------------------------------------------------------


def listed(secrets_file: Path) -> dict[str, str]:
    """user -> password of the secrets file (nothing when it does not exist yet)."""
    try:
        text = secrets_file.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StagingError(f"rsyncd_secrets {secrets_file}: {exc.strerror or exc}") from None
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def grant(secrets_file: Path, key: bytes, user: str) -> str:
    """`user`'s password, with their line in the secrets file: when it is missing or stale
    (or the file is not root 0600), every listed user's line is made again from the key
    and the file replaced atomically, root 0600."""
    secret = password(key, user)
    with _lock:
        users = listed(secrets_file)
        if users.get(user) == secret and is_private(secrets_file):
            return secret
        names = {u for u in {*users, user} if USER_NAME.fullmatch(u) and u != "root"}
        lines = "".join(f"{u}:{password(key, u)}\n" for u in sorted(names))
        _replace(secrets_file, lines.encode())
    return secret


def _replace(path: Path, content: bytes) -> None:
    try:
        write_private(path, content)
    except ValueError as exc:
        raise StagingError(f"rsyncd_secrets {exc}") from None


# --- the transfer job's side -------------------------------------------------------------


@contextlib.contextmanager
def password_in_env(secret: str) -> Iterator[None]:
    """RSYNC_PASSWORD for the rsync processes started meanwhile (the environment, which
    only the user and root can read: never argv); the caller's own value restored after."""
    if not secret:
        yield
        return
    before = os.environ.get(PASSWORD_ENV)
    os.environ[PASSWORD_ENV] = secret
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PASSWORD_ENV, None)
        else:
            os.environ[PASSWORD_ENV] = before

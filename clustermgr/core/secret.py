"""A secret value that does not print itself: what a password read from a file or the
environment travels in (BMC passwords, the LDAP replica's bind password) until the one call
that hands it to its client. Shared by providers and directors, so it lives at the bottom
of the layers, next to the errors. With it, the one way a secret is written to a file:
root 0600, replaced atomically."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path

MASK = "********"


class Secret:
    """A password that does not print itself: str, repr and format show a mask."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    def __str__(self) -> str:
        return MASK


def write_private(path: Path, content: bytes) -> None:
    """Replace `path` atomically with `content`, owned by this uid (root: root:root), mode
    0600: a scratch file beside it, written, synced, renamed over. OSError when the file
    cannot be written; ValueError (one line) when its directory is not this uid's alone,
    since whoever can write there could replace the file."""
    write_atomic(path, content, 0o600)


def write_atomic(path: Path, content: bytes, mode: int) -> None:
    """`write_private` with another mode (a generated file others read: 0644)."""
    parent = path.parent
    try:
        info = parent.lstat()
    except FileNotFoundError:
        raise ValueError(f"{path}: its directory does not exist") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise ValueError(
            f"{path}: its directory must be uid {os.geteuid()}'s and writable by no one else "
            "(someone could replace the file)"
        )
    scratch = parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(scratch)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(scratch, flags, 0o600)
    try:
        if os.geteuid() == 0:
            os.fchown(fd, 0, 0)
        os.fchmod(fd, mode)
        os.write(fd, content)
        os.fsync(fd)
    except OSError:
        os.close(fd)
        os.unlink(scratch)
        raise
    os.close(fd)
    os.replace(scratch, path)


def is_private(path: Path) -> bool:
    """A regular file of this uid that no one else may read or write."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return (
        stat.S_ISREG(info.st_mode)
        and info.st_uid == os.geteuid()
        and not stat.S_IMODE(info.st_mode) & 0o077
    )

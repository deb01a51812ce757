"""Every user's staging areas live in `<root>/<user>`, a directory owned by that user, 0700.

The service (root) creates it and refuses one owned by anyone else (an attacker who
pre-created `<root>/<victim>` would otherwise read and replace the victim's data); the
transfer step (the user) checks it again before it copies. A path given to cleanup must
be strictly inside the caller's own `<root>/<user>/`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from clustermgr.core.errors import StagingError
from clustermgr.staging import rsyncd_auth
from clustermgr.staging.rsync_transport import is_url


def user_root(root: str, user: str) -> str:
    """`<root>/<user>`; on an rsync daemon, the staging module reached as the user
    (`rsync://user@host:port/module`, which the daemon maps to its `<root>/<user>`)."""
    return rsyncd_auth.user_root(root, user)


def ensure_user_root(root: str, user: str, uid: int, gid: int) -> None:
    """As root: `<root>/<user>` exists, is a real directory owned by uid, mode 0700.
    An rsync daemon URL is the daemon's to guard (its module's per-user auth), not ours."""
    if is_url(root):
        return
    base = Path(root)
    if not base.is_dir():
        raise StagingError(f"staging root {root} does not exist: ask your admin")
    path = base / user
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    else:
        os.chown(path, uid, gid, follow_symlinks=False)
    check_owned(path, uid, fix_mode=True)


def check_owned(path: Path, uid: int, *, fix_mode: bool = False) -> None:
    """`path` is a directory (not a symlink) owned by `uid`, closed to everyone else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        raise StagingError(
            f"staging area {path} is not a directory of its own (a symlink or a file): "
            "refused; ask your admin to remove it"
        ) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != uid:
            raise StagingError(
                f"staging area {path} belongs to uid {info.st_uid}, not to uid {uid}: refused "
                "(someone else made it); ask your admin to remove it"
            )
        if stat.S_IMODE(info.st_mode) & 0o077:
            if not fix_mode:
                raise StagingError(
                    f"staging area {path} is open to others (mode "
                    f"{stat.S_IMODE(info.st_mode):o}): refused; chmod 700 it"
                )
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def check_inside(area: str, root: str, user: str) -> None:
    """`area` is strictly inside `<root>/<user>/`, with no `..` on the way."""
    mine = user_root(root, user) + "/"
    rest = area.removeprefix(mine)
    parts = PurePosixPath(rest).parts
    if not area.startswith(mine) or not parts or ".." in parts or rest.startswith("/"):
        raise StagingError(f"{area!r} is not inside your staging area {mine}: refused")

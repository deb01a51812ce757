"""Can an account run a program? Slurm runs ResumeProgram and SuspendProgram as SlurmUser
and silently disables power saving when it cannot (`power_save module disabled, invalid
SuspendProgram`): `config check` asks the same question first, with the file's and every
parent directory's mode bits as that account sees them."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path


def _may(info: os.stat_result, uid: int, gids: set[int], bits: tuple[int, int, int]) -> bool:
    user_bit, group_bit, other_bit = bits
    if uid == 0:
        return stat.S_ISDIR(info.st_mode) or bool(info.st_mode & (user_bit | group_bit | other_bit))
    if info.st_uid == uid:
        return bool(info.st_mode & user_bit)
    if info.st_gid in gids:
        return bool(info.st_mode & group_bit)
    return bool(info.st_mode & other_bit)


EXECUTE = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)


def why_not_runnable(program: Path, account: str) -> str | None:
    """None when `account` can execute `program`; else what stops it, in words."""
    try:
        entry = pwd.getpwnam(account)
    except KeyError:
        return f"there is no account {account!r} on this host"
    gids = set(os.getgrouplist(account, entry.pw_gid))
    if not program.is_absolute():
        return f"{program} is not an absolute path"
    try:
        resolved = program.resolve(strict=True)
        info = resolved.stat()
    except (OSError, RuntimeError):
        return f"{program} does not exist"
    if not stat.S_ISREG(info.st_mode):
        return f"{program} is not a regular file"
    for parent in reversed(resolved.parents):
        if not _may(parent.stat(), entry.pw_uid, gids, EXECUTE):
            return f"{account} cannot enter {parent} ({stat.filemode(parent.stat().st_mode)})"
    if not _may(info, entry.pw_uid, gids, EXECUTE):
        mode = stat.filemode(info.st_mode)
        return f"{account} may not execute {program} ({mode} {_owner(info)})"
    return None


def _owner(info: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        user = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return f"{user}:{group}"

"""Files that hold secrets and are readable by group or others, a secret inside the config
file, a config file SlurmUser cannot read: one warning line each.

The configuration holds no secret: a provider names where its credentials come from, and
the database password lives in `[database] password_file` (root 0600) or a systemd
credential (config/dbpassword.py). The config file itself is read by the power-saving hooks
as SlurmUser, so it must stay readable to them (root:<SlurmUser's group> 0640), which is why
a password in `database.url` is advice to move it, never to chmod 600 the config.
`clustermgr config check` prints these lines and cm-scale logs them when it starts.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from clustermgr.config import Settings
from clustermgr.config.sections import url_has_password
from clustermgr.core.kinds import kind_of


def exposed_secret_files(
    settings: Settings, config_path: Path, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """A warning per secret-holding file that group or others may read; one for a password
    in the config file; one when SlurmUser cannot read the config file."""
    warnings = []
    if url_has_password(settings.database.url):
        warnings.append(
            f"warning: {config_path} holds the database password (database.url), and the hooks "
            "read this file as SlurmUser: put the password alone in /etc/clustermgr/db.password "
            "(root 0600), drop it from url and set [database] password_file = "
            '"/etc/clustermgr/db.password" (or password_credential, docs/security.md)'
        )
    unreadable = slurm_user_cannot_read(config_path, settings.slurm.user)
    if unreadable:
        warnings.append(
            f"warning: {config_path}: SlurmUser {settings.slurm.user} cannot read it "
            f"({unreadable}), and the power-saving hooks read it as SlurmUser: every "
            f"resume/suspend would fail; chown root:{_group_of(settings.slurm.user)} "
            f"{config_path} && chmod 640 {config_path} (secrets go in password_file)"
        )
    for path, holds in _secret_files(settings, environ):
        try:
            mode = path.stat().st_mode
        except OSError:
            continue  # absent or unreadable to us: the provider's own check says so
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            warnings.append(
                f"warning: {path} holds {holds} and is readable by group or others "
                f"(mode {stat.S_IMODE(mode):04o}): chmod 600 {path}"
            )
    return warnings


def slurm_user_cannot_read(path: Path, user: str) -> str | None:
    """Why `user` cannot read `path` by its mode bits and its directories' (None: it can,
    or the account or file is not there: other checks say so). ACLs are not consulted."""
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        return None
    if account.pw_uid == 0:
        return None
    groups = set(os.getgrouplist(user, account.pw_gid))
    path = path.absolute()
    for directory in reversed(path.parents):
        reason = _denied(directory, account.pw_uid, groups, stat.S_IXUSR)
        if reason:
            return f"directory {directory}: {reason}"
    return _denied(path, account.pw_uid, groups, stat.S_IRUSR)


def _denied(path: Path, uid: int, groups: set[int], owner_bit: int) -> str | None:
    try:
        info = path.stat()
    except OSError:
        return None
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid == uid:
        allowed = mode & owner_bit
    elif info.st_gid in groups:
        allowed = mode & (owner_bit >> 3)
    else:
        allowed = mode & (owner_bit >> 6)
    if allowed:
        return None
    return f"mode {mode:04o}, owner {_name(info.st_uid)}:{_group_name(info.st_gid)}"


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _group_of(user: str) -> str:
    return _group_name(pwd.getpwnam(user).pw_gid)


def _secret_files(settings: Settings, environ: Mapping[str, str]) -> Iterator[tuple[Path, str]]:
    if settings.database.password_file is not None:
        yield settings.database.password_file, "the database password (database.password_file)"
    for provider in settings.providers:
        creds = provider.credentials
        if creds.secret_file is not None:
            yield creds.secret_file, f"provider {provider.name}'s client secret"
        own = kind_of(provider.type).secret_files  # the files its kind reads secrets from
        if own is not None:
            yield from own(provider, environ)

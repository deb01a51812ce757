"""The database password, from where `[database]` says it lives apart from the config file:
a root-only file (`password_file`) or a systemd credential (`password_credential`, read
from `$CREDENTIALS_DIRECTORY/<name>`, which the unit's `LoadCredential=` provides).

The config file stays readable by SlurmUser (the power-saving hooks read it, as SlurmUser);
only cm-scale and root's CLI read the password, when they open the database. The hooks never
call this. Every failure is one line naming the place, never the content.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from clustermgr.config.sections import DatabaseSettings
from clustermgr.core.errors import ConfigError
from clustermgr.core.secret import Secret

CREDENTIALS_ENV = "CREDENTIALS_DIRECTORY"


def password_place(
    database: DatabaseSettings, environ: Mapping[str, str] = os.environ
) -> tuple[Path, str] | None:
    """The file the password is read from and how to name it in a message; None when the
    config gives no password source. The credential wins when the unit provides one."""
    credentials = environ.get(CREDENTIALS_ENV, "")
    if database.password_credential is not None and credentials:
        path = Path(credentials) / database.password_credential
        if path.exists() or database.password_file is None:
            return path, f"credential {database.password_credential!r} ({path})"
    if database.password_file is not None:
        return database.password_file, f"password_file {database.password_file}"
    if database.password_credential is not None:
        raise ConfigError(
            f"[database] password_credential {database.password_credential!r}: "
            f"${CREDENTIALS_ENV} is not set (cm-scale's unit sets it with LoadCredential=; "
            "for root's CLI also set password_file)"
        )
    return None


def read_database_password(
    database: DatabaseSettings, environ: Mapping[str, str] = os.environ
) -> Secret | None:
    """The password (first line of its file), or None when the config names no source.
    ConfigError when the file is missing, unreadable, empty, or group/other may read it."""
    place = password_place(database, environ)
    if place is None:
        return None
    path, named = place
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"[database] {named}: cannot read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"[database] {named}: not a regular file")
        if info.st_mode & 0o077:
            raise ConfigError(
                f"[database] {named} is readable by group or others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}): chmod 600 {path}"
            )
        raw = os.read(fd, 64 * 1024)
    finally:
        os.close(fd)
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"[database] {named}: not UTF-8 text") from None
    value = lines[0].strip() if lines else ""
    if not value:
        raise ConfigError(f"[database] {named} is empty")
    return Secret(value)

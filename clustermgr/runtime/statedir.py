"""The state directory's owners and modes: cm-scale creates and repairs them at every start.

    <state_dir>/               root:root 0711   others may traverse, never list
      clustermgr.db -wal -shm  root:ADMIN 0640  (root:root 0600 without [daemon] admin_group)
      heartbeat.json           root:ADMIN 0640  the hooks only stat it (its age)
      spool/                   root:SLURM 0730  SlurmUser adds requests; nobody else enters
      cm-scale.sock            root:SLURM 0660  SlurmUser pokes the daemon
      leader/                  root:root  0700
        cm-scale.lock          root:root  0600  the SQLite leader lease's session lock

SLURM is SlurmUser's primary group, ADMIN the group `[daemon] admin_group` names. Run as
anyone but root (a developer's own state directory), the modes are set but owners are not.
docs/security.md (section state) is the model behind it.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from clustermgr.core.errors import ConfigError
from clustermgr.workload.hooks import HEARTBEAT_FILE

STATE_DIR_MODE = 0o711
SPOOL_MODE = 0o730
SOCKET_MODE = 0o660
LEADER_DIR = "leader"
LEADER_DIR_MODE = 0o700
SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


@dataclass(frozen=True)
class StateOwners:
    """Who the state directory's files belong to, resolved from the config's names."""

    slurm_user: str
    slurm_uid: int
    slurm_gid: int
    admin_group: str  # "" when none: then root alone reads the database
    admin_gid: int | None

    @property
    def reader_gid(self) -> int:
        return 0 if self.admin_gid is None else self.admin_gid

    @property
    def reader_mode(self) -> int:
        """The database's and heartbeat's mode: group-readable only when admins are named."""
        return 0o600 if self.admin_gid is None else 0o640

    @property
    def spool_writers(self) -> frozenset[int]:
        return frozenset({0, self.slurm_uid})


def resolve_owners(slurm_user: str, admin_group: str) -> StateOwners:
    """The accounts by name; one line naming the setting when one does not exist here."""
    try:
        slurm = pwd.getpwnam(slurm_user)
    except KeyError:
        raise ConfigError(
            f"[slurm] user = {slurm_user!r}: no such account on this host; set it to "
            "SlurmUser from slurm.conf (the hooks run as it)"
        ) from None
    admin_gid = None
    if admin_group:
        try:
            admin_gid = grp.getgrnam(admin_group).gr_gid
        except KeyError:
            raise ConfigError(
                f"[daemon] admin_group = {admin_group!r}: no such group on this host; create "
                "it or leave admin_group unset (root alone then reads the database)"
            ) from None
    return StateOwners(slurm_user, slurm.pw_uid, slurm.pw_gid, admin_group, admin_gid)


def ensure_state_layout(state_dir: Path, owners: StateOwners) -> None:
    """Create the layout above, or repair owners and modes a previous release (or a hand)
    left looser. Raises ConfigError when a path in it is not what it must be (a symlink)."""
    _directory(state_dir, 0, 0, STATE_DIR_MODE)
    _directory(state_dir / "spool", 0, owners.slurm_gid, SPOOL_MODE)
    _directory(state_dir / LEADER_DIR, 0, 0, LEADER_DIR_MODE)
    heartbeat = state_dir / "heartbeat.json"
    if heartbeat.exists():
        secure_file(heartbeat, owners.reader_gid, owners.reader_mode)


def secure_sqlite_files(database: Path, owners: StateOwners) -> None:
    """The database file and the journal files SQLite keeps beside it (it creates new ones
    with the database file's owner and mode)."""
    for suffix in SQLITE_SIDE_FILES:
        path = database.with_name(database.name + suffix)
        if path.exists():
            _secure_sqlite_file(path, owners.reader_gid, owners.reader_mode)


def _secure_sqlite_file(path: Path, gid: int, mode: int) -> None:
    """By path, never through a descriptor: closing any descriptor of a file drops every
    POSIX lock this process holds on it, SQLite's included (its -shm lock lost, another
    process's connection would checkpoint and delete the WAL a live connection writes to).
    The directory is root's, so nobody can swap the file between the lstat and the chmod."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path}: not a regular file; remove it and restart cm-scale")
    if os.geteuid() == 0:
        os.chown(path, 0, gid, follow_symlinks=False)
    os.chmod(path, mode)


def secure_file(path: Path, gid: int, mode: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file; remove it and restart cm-scale")
        if os.geteuid() == 0:
            os.fchown(fd, 0, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _directory(path: Path, uid: int, gid: int, mode: int) -> None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"{path}: cannot create the directory: {exc.strerror}") from None
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(
            f"{path}: not a directory (a symlink or a file); remove it and restart cm-scale"
        )
    if os.geteuid() == 0 and (info.st_uid, info.st_gid) != (uid, gid):
        os.chown(path, uid, gid, follow_symlinks=False)
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)


def create_private_file(path: Path, gid: int, mode: int) -> int:
    """Open (creating) a file for writing without following a link, with its owner and
    mode set on the descriptor before anything is written. Returns the fd."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        if os.geteuid() == 0:
            os.fchown(fd, 0, gid)
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return fd


def prepare_state_dir(
    state_dir: Path, slurm_user: str, admin_group: str, db_url: str
) -> StateOwners:
    """What cm-scale does at start: resolve the accounts, create or repair the layout, and
    give the SQLite files (when the database is one) their owner and mode."""
    from sqlalchemy import make_url

    owners = resolve_owners(slurm_user, admin_group)
    ensure_state_layout(state_dir, owners)
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        secure_sqlite_files(Path(str(url.database)), owners)
    return owners


def keep_journal_open(db_url: str) -> sqlite3.Connection | None:
    """A connection cm-scale holds for its lifetime, so the -wal and -shm files (which
    SQLite deletes when the last connection closes, say a root CLI's) stay in place while
    it runs: a read-only reader cannot create them in root's directory."""
    from sqlalchemy import make_url

    url = make_url(db_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    keeper = sqlite3.connect(str(url.database), check_same_thread=False)
    keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()
    return keeper


def write_heartbeat(
    state_dir: Path, beat: dict[str, object], owners: StateOwners | None = None
) -> None:
    """The heartbeat file: root's, group-readable by the admins (statedir.py); the hooks
    only stat it for its age."""
    path = state_dir / HEARTBEAT_FILE
    partial = state_dir / f".{HEARTBEAT_FILE}.tmp"
    gid, mode = (owners.reader_gid, owners.reader_mode) if owners else (0, 0o600)
    partial.unlink(missing_ok=True)
    fd = create_private_file(partial, gid, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(beat))
    os.replace(partial, path)


def heartbeat_age(state_dir: Path) -> float | None:
    """Seconds since the last heartbeat, or None when there is none."""
    try:
        return time.time() - (state_dir / HEARTBEAT_FILE).stat().st_mtime
    except OSError:
        return None

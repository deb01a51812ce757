"""The hostile-user suite: real unprivileged accounts on this machine try to cross each
boundary of docs/security.md. Every test here runs as root (it creates the accounts and
starts cm-scale as a site would) and acts as those users through `as_user`."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import cannot_run

# Accounts the suite creates once per machine (idempotent) and leaves in place: two
# ordinary users, and a group an admin may be given read access through. SlurmUser is
# Debian's `slurm` account, which the slurm-wlm package creates.
ATTACKER = "cmsec-mallory"
VICTIM = "cmsec-alice"
ADMINS_GROUP = "cmsec-admins"
ADMIN = "cmsec-admin"
SLURM_USER = "slurm"


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str


def _ensure_group(name: str) -> None:
    try:
        grp.getgrnam(name)
    except KeyError:
        subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)


def _ensure_user(name: str, groups: Sequence[str] = ()) -> Account:
    try:
        pwd.getpwnam(name)
    except KeyError:
        argv = ["useradd", "--create-home", "--shell", "/bin/sh", "--user-group"]
        if groups:
            argv += ["--groups", ",".join(groups)]
        subprocess.run([*argv, name], check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


@dataclass(frozen=True)
class Accounts:
    attacker: Account
    victim: Account
    admin: Account
    slurm: Account
    admins_group: str


@pytest.fixture(scope="session")
def accounts() -> Accounts:
    """Real accounts: an attacker, a victim, an admin in ADMINS_GROUP, and SlurmUser."""
    if os.geteuid() != 0:
        cannot_run("the security suite creates users and runs cm-scale as root")
    if shutil.which("useradd") is None or shutil.which("runuser") is None:
        cannot_run("useradd and runuser are needed (Debian's passwd and util-linux)")
    try:
        slurm = pwd.getpwnam(SLURM_USER)
    except KeyError:
        cannot_run("no `slurm` account (Debian's slurm-wlm package creates it)")
        raise
    _ensure_group(ADMINS_GROUP)
    return Accounts(
        attacker=_ensure_user(ATTACKER),
        victim=_ensure_user(VICTIM),
        admin=_ensure_user(ADMIN, groups=[ADMINS_GROUP]),
        slurm=Account(slurm.pw_name, slurm.pw_uid, slurm.pw_gid, slurm.pw_dir),
        admins_group=ADMINS_GROUP,
    )


def as_user(
    user: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run argv as `user` (its own uid, gid and groups; no capability kept), from /."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv],
        capture_output=True,
        text=True,
        env=full_env,
        cwd="/",
        timeout=timeout,
        input=input_text,
        check=False,
    )


@pytest.fixture
def alice_dir(accounts: Accounts) -> Iterator[Path]:
    yield from _own_dir(accounts.victim)


@pytest.fixture
def mallory_dir(accounts: Accounts) -> Iterator[Path]:
    yield from _own_dir(accounts.attacker)


def _own_dir(user: Account) -> Iterator[Path]:
    """A fresh directory of `user`'s in their home, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="cmsec-", dir=user.home))
    os.chown(where, user.uid, user.gid)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)

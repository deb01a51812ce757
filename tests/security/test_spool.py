"""The hook spool: only SlurmUser (and root) can put a request in it, and whatever else is
found there is moved aside once, with one warning naming its owner, without blocking or
failing a cycle (docs/security.md, section state)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.security.conftest import Accounts, as_user
from tests.security.statelab import BIN, StateLab, state_lab

FORGE = """
import json, sys, time
path = sys.argv[1]
try:
    with open(path, "w") as f:
        json.dump({"kind": "suspend", "nodes": ["cloud1"], "at": time.time()}, f)
except OSError as exc:
    print(type(exc).__name__, exc.strerror)
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def lab(accounts: Accounts) -> Iterator[StateLab]:
    with state_lab(accounts.slurm.name, accounts.admins_group) as running:
        yield running


@pytest.fixture
def secret(lab: StateLab) -> Iterator[Path]:
    """A root-only file the planted links point at; nothing else on the machine touches it
    (unlike /etc/shadow, which every useradd rewrites), so any change is the daemon's."""
    path = lab.base / "root-secret"
    path.write_text("root only\n")
    path.chmod(0o600)
    yield path
    path.unlink()


def _unchanged(path: Path, before: os.stat_result) -> bool:
    after = path.stat()
    return (after.st_mode, after.st_uid, after.st_mtime_ns, after.st_size) == (
        before.st_mode,
        before.st_uid,
        before.st_mtime_ns,
        before.st_size,
    )


def test_a_user_cannot_put_a_request_in_the_spool(lab: StateLab, accounts: Accounts) -> None:
    forged = lab.spool / "1.000000-1-suspend.json"
    done = as_user(accounts.attacker.name, [sys.executable, "-c", FORGE, str(forged)])
    assert done.returncode == 3 and done.stdout.strip() == "PermissionError Permission denied"
    hook = as_user(
        accounts.attacker.name,
        [str(BIN / "clustermgr-slurm-resume"), "cloud[1-4]"],
        env={"CLUSTERMGR_CONFIG": str(lab.config)},
    )
    assert hook.returncode == 2, hook.stderr
    assert "cannot write the request into" in hook.stderr and "Permission denied" in hook.stderr
    lab.keeps_cycling()
    assert lab.cloud_changes() == 0


def test_slurm_users_request_is_accepted(lab: StateLab, accounts: Accounts) -> None:
    """The same hook as SlurmUser is read and consumed by the next cycle."""
    done = as_user(
        accounts.slurm.name,
        [str(BIN / "clustermgr-slurm-suspend"), "cloud2"],
        env={"CLUSTERMGR_CONFIG": str(lab.config)},
    )
    assert done.returncode == 0, done.stderr
    lab.wait_for("the request to be consumed", lambda: not list(lab.spool.glob("*.json")), 10)
    assert "spool:" not in lab.output()


def test_what_no_hook_wrote_is_moved_aside_once(
    lab: StateLab, accounts: Accounts, secret: Path
) -> None:
    victim_file = lab.base / "root-owned.txt"  # on the spool's file system, for the hard link
    victim_file.write_text("root's\n")
    victim_file.chmod(0o600)
    secret_before = secret.stat()
    planted = {
        "fifo.json": "not a regular file (p-type)",
        "link.json": "a symbolic link, not a request",
        "hard.json": "has 2 hard links",
        "huge.json": "104857600 bytes, over the 1048576-byte limit",
        "mallory.json": "written by neither root nor SlurmUser",
        "dir.json": "not a regular file (d-type)",
        "garbage.json": "not JSON",
    }
    os.mkfifo(lab.spool / "fifo.json")
    os.chown(lab.spool / "fifo.json", accounts.slurm.uid, accounts.slurm.gid)
    os.symlink(secret, lab.spool / "link.json")
    os.link(victim_file, lab.spool / "hard.json")
    with open(lab.spool / "huge.json", "wb") as huge:
        huge.truncate(100 * 1024 * 1024)
    (lab.spool / "mallory.json").write_text('{"kind": "resume", "nodes": ["cloud1"], "at": 1}')
    os.chown(lab.spool / "mallory.json", accounts.attacker.uid, accounts.attacker.gid)
    (lab.spool / "dir.json").mkdir()
    garbage = as_user(
        accounts.slurm.name,
        [
            sys.executable,
            "-c",
            "open(__import__('sys').argv[1], 'w').write('{')",
            str(lab.spool / "garbage.json"),
        ],
    )
    assert garbage.returncode == 0, garbage.stderr

    lab.wait_for(
        "every planted entry moved aside",
        lambda: (
            not any(
                (lab.spool / name).exists() or (lab.spool / name).is_symlink() for name in planted
            )
        ),
        15,
    )
    lab.keeps_cycling(3)  # and never reported again
    warnings = [ln for ln in lab.output().splitlines() if "WARNING" in ln and "spool: " in ln]
    owners = {
        "fifo.json": f"owner {accounts.slurm.name} (uid {accounts.slurm.uid})",
        "mallory.json": f"owner {accounts.attacker.name} (uid {accounts.attacker.uid})",
        "link.json": "owner root (uid 0)",
    }
    for name, problem in planted.items():
        said = [w for w in warnings if f"spool: {name}: " in w]
        assert len(said) == 1, (name, said)
        assert problem in said[0] and f"moved aside to {name}.rejected" in said[0], said[0]
        assert owners.get(name, "(uid ") in said[0], said[0]
        aside = lab.spool / f"{name}.rejected"
        assert aside.exists() or aside.is_symlink(), name
    assert victim_file.read_text() == "root's\n"
    assert _unchanged(secret, secret_before)
    assert lab.cloud_changes() == 0


RACE = """
import os, sys, time
spool, seconds, secret = sys.argv[1], float(sys.argv[2]), sys.argv[3]
final, tmp = os.path.join(spool, "race.json"), os.path.join(spool, ".race.tmp")
end, swaps = time.monotonic() + seconds, 0
while time.monotonic() < end:
    for make in (
        lambda: os.mkfifo(tmp),
        lambda: os.symlink(secret, tmp),
        lambda: open(tmp, "wb").truncate(64 * 1024 * 1024),
        lambda: open(tmp, "w").write('{"kind": "suspend", "nodes": ["cloud3"], "at": 1}'),
    ):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        make()
        os.replace(tmp, final)  # the name the daemon just listed is now something else
        swaps += 1
print(swaps)
"""


def test_a_request_swapped_under_the_daemon_is_never_followed_nor_blocks_it(
    lab: StateLab, accounts: Accounts, secret: Path
) -> None:
    """SlurmUser swaps one request name between a FIFO, a link to a root-only file, a 64 MB
    file and a valid request as fast as it can while cycles read the spool: no cycle
    blocks, nothing is followed, the last entry is judged like any other."""
    secret_before = secret.stat()
    cycles_before = lab.cycles()
    racer = as_user(
        accounts.slurm.name, [sys.executable, "-c", RACE, str(lab.spool), "4", str(secret)]
    )
    assert racer.returncode == 0, racer.stderr
    assert int(racer.stdout) > 100, racer.stdout  # it really raced
    assert lab.cycles() >= cycles_before + 2, lab.output()[-2000:]  # cycles went on meanwhile
    lab.keeps_cycling(2)
    lab.wait_for(
        "the last swapped entry judged", lambda: not (lab.spool / "race.json").exists(), 10
    )
    assert _unchanged(secret, secret_before)
    assert "Traceback" not in lab.output()

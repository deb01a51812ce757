"""The state directory as cm-scale makes it: the database, its WAL, the heartbeat and the
leader lock are root's (the admins' group reads the database and heartbeat), the socket is
SlurmUser's group's alone and rate-limited, and a user can neither read, lock, poke nor
signal anything of the daemon's (docs/security.md, section state)."""

from __future__ import annotations

import grp
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from clustermgr.runtime.daemon import POKE_MIN_GAP_S
from tests.security.conftest import Accounts, as_user
from tests.security.statelab import BIN, INTERVAL_S, StateLab, mode_of, state_lab

FLOOD = """
import socket, sys, time
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sent, end = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    try:
        sock.sendto(b"wake", sys.argv[1])
        sent += 1
    except BlockingIOError:
        time.sleep(0.001)
    except OSError as exc:
        print(type(exc).__name__, exc.strerror)
        sys.exit(3)
print(sent)
"""
READ_ONLY_VERBS = (
    ("status", "--json"),
    ("nodes", "list", "--json"),
    ("events", "--json"),
    ("transfers", "list", "--json"),
)
WRITE_VERBS = (
    ("nodes", "sync", "--no-slurm"),
    ("db", "upgrade"),
    ("templates", "reset", "gpu"),
)


@pytest.fixture(scope="module")
def lab(accounts: Accounts) -> Iterator[StateLab]:
    with state_lab(accounts.slurm.name, accounts.admins_group) as running:
        yield running


def test_the_layout_cm_scale_makes(lab: StateLab, accounts: Accounts) -> None:
    admins = grp.getgrnam(accounts.admins_group).gr_gid
    slurm_gid = accounts.slurm.gid
    lab.wait_for("the WAL", lambda: (lab.state / "clustermgr.db-wal").exists(), 10)
    assert mode_of(lab.state) == (0, 0, 0o711)
    for name in ("clustermgr.db", "clustermgr.db-wal", "clustermgr.db-shm", "heartbeat.json"):
        assert mode_of(lab.state / name) == (0, admins, 0o640), name
    assert mode_of(lab.spool) == (0, slurm_gid, 0o730)
    assert mode_of(lab.state / "cm-scale.sock") == (0, slurm_gid, 0o660)
    assert mode_of(lab.state / "leader") == (0, 0, 0o700)
    assert mode_of(lab.state / "leader" / "cm-scale.lock") == (0, 0, 0o600)


def test_a_user_reads_nothing_of_the_state(lab: StateLab, accounts: Accounts) -> None:
    user = accounts.attacker.name
    for name in ("clustermgr.db", "clustermgr.db-wal", "heartbeat.json", "leader/cm-scale.lock"):
        done = as_user(user, ["cat", str(lab.state / name)])
        assert done.returncode == 1 and "Permission denied" in done.stderr, (name, done)
    assert as_user(user, ["ls", str(lab.state)]).returncode != 0
    listing = lab.clustermgr("nodes", "list", "--json")  # root sees the rows a user must not
    assert listing.returncode == 0, listing.stderr
    done = as_user(user, [str(BIN / "clustermgr"), "--config", str(lab.config), "nodes", "list"])
    assert done.returncode == 1, done
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("clustermgr: error: database ") and "unable to open" in line, line


def test_a_user_running_status_is_told_what_they_may_do(lab: StateLab, accounts: Accounts) -> None:
    """Not root, not in admin_group: one line naming who may read the state and what the
    user may run instead, never advice only root can follow (`db upgrade`)."""
    cli = [str(BIN / "clustermgr"), "--config", str(lab.config)]
    for verb in (["status"], ["status", "--check"], ["status", "--json"]):
        done = as_user(accounts.attacker.name, [*cli, *verb])
        assert done.returncode == 2 and done.stdout == "", (verb, done)
        [line] = done.stderr.strip().splitlines()
        assert line == (
            "clustermgr: error: `clustermgr status` reads cm-scale's state, which only root "
            f"and the group {accounts.admins_group} may read; `cmsub --status JOBID` shows "
            "your own transfers, squeue and sinfo the queue"
        ), line
        assert "db upgrade" not in done.stderr
    admin = as_user(accounts.admin.name, [*cli, "status", "--check"])
    assert admin.returncode == 0 and admin.stdout.startswith("cm-scale: ok: leader on "), admin


def test_a_user_cannot_take_or_hold_the_leader_lock(lab: StateLab, accounts: Accounts) -> None:
    lock = lab.state / "leader" / "cm-scale.lock"
    done = as_user(accounts.attacker.name, ["flock", "-x", "-n", str(lock), "true"])
    assert done.returncode != 0 and "Permission denied" in done.stderr, done
    lab.keeps_cycling()
    assert "standing by" not in lab.output()


def test_a_second_daemon_says_who_holds_the_lock(lab: StateLab) -> None:
    assert lab.daemon is not None
    once = subprocess.run(
        [str(BIN / "cm-scale"), "--once", "--skip-slurm-check", "--config", str(lab.config)],
        capture_output=True,
        text=True,
        env=lab.env,
        timeout=120,
        check=False,
    )
    assert once.returncode == 1
    said = f"the leader lease is held by cm-scale@{socket.gethostname()}:{lab.daemon.pid} ("
    assert said in once.stderr, once.stderr


def test_the_socket_refuses_users_and_coalesces_slurms_flood(
    lab: StateLab, accounts: Accounts
) -> None:
    sock = str(lab.state / "cm-scale.sock")
    refused = as_user(accounts.attacker.name, [sys.executable, "-c", FLOOD, sock, "0.5"])
    assert refused.returncode == 3 and "PermissionError" in refused.stdout, refused
    window_s = 4.0
    before = lab.cycles()
    flood = as_user(accounts.slurm.name, [sys.executable, "-c", FLOOD, sock, str(window_s)])
    assert flood.returncode == 0, flood
    assert int(flood.stdout) > 1000  # SlurmUser may poke, as fast as it likes
    time.sleep(0.5)  # a cycle the last poke started is counted
    during = lab.cycles() - before
    # the scheduled cycles plus at most one early cycle per POKE_MIN_GAP_S
    assert during <= window_s / INTERVAL_S + window_s / POKE_MIN_GAP_S + 2, during
    lab.keeps_cycling()


def test_a_user_cannot_signal_the_daemon(lab: StateLab, accounts: Accounts) -> None:
    assert lab.daemon is not None
    pid = str(lab.daemon.pid)
    for sig in ("TERM", "KILL", "HUP"):
        done = as_user(accounts.attacker.name, ["kill", f"-{sig}", pid])
        assert done.returncode != 0 and "Operation not permitted" in done.stderr, (sig, done)
    lab.keeps_cycling()
    assert lab.daemon.poll() is None


def test_admins_read_and_only_read(lab: StateLab, accounts: Accounts) -> None:
    admin = accounts.admin.name
    cli = [str(BIN / "clustermgr"), "--config", str(lab.config)]
    events_before = lab.clustermgr("events", "--json", "--limit", "10000").stdout
    for verb in READ_ONLY_VERBS:
        done = as_user(admin, [*cli, *verb])
        assert done.returncode == 0, (verb, done.stderr)
        json.loads(done.stdout)
    status = json.loads(as_user(admin, [*cli, "status", "--json"]).stdout)
    assert "cycle" in json.dumps(status)  # the daemon's live row, read through the WAL
    for verb in WRITE_VERBS:
        done = as_user(admin, [*cli, *verb])
        assert done.returncode == 2, (verb, done)
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"clustermgr: error: `clustermgr {' '.join(verb[:2])}") and (
            "only root may do" in line
        ), line
    assert lab.clustermgr("events", "--json", "--limit", "10000").stdout.count('"kind"') >= (
        events_before.count('"kind"')
    )
    assert os.stat(lab.database).st_uid == 0


def test_the_unit_sets_a_umask() -> None:
    from pathlib import Path

    unit = (Path(__file__).parents[2] / "etc" / "systemd" / "cm-scale.service").read_text()
    assert "\nUMask=0077\n" in unit
    assert "\nNoNewPrivileges=yes\n" in unit and "\nProtectSystem=strict\n" in unit


def test_signal_from_root_still_stops_it_and_admins_still_read(
    lab: StateLab, accounts: Accounts
) -> None:
    """Last: the daemon that withstood every user still obeys root's SIGTERM; with it
    stopped (no -wal file left), an admin still reads the database."""
    assert lab.daemon is not None
    lab.daemon.send_signal(signal.SIGTERM)
    assert lab.daemon.wait(timeout=30) == 0
    assert "stopped cleanly" in lab.output()
    # the last connection out: no WAL left; exit 1: no live leader (monitoring's signal)
    as_root = lab.clustermgr("status", "--json")
    assert as_root.returncode == 1, as_root.stderr
    assert not (lab.state / "clustermgr.db-wal").exists()
    cli = [str(BIN / "clustermgr"), "--config", str(lab.config)]
    done = as_user(accounts.admin.name, [*cli, "status", "--json"])
    assert done.returncode == 1, done.stderr
    seen, rooted = json.loads(done.stdout), json.loads(as_root.stdout)
    for key in ("daemons", "heartbeat_age_s", "lease"):  # ages move between the two reads
        seen.pop(key, None), rooted.pop(key, None)
    assert seen == rooted  # what root reads, through no WAL at all

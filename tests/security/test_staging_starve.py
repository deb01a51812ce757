"""A local user tries to starve the staging service, and through it cm-scale: a thousand
idle connections trickling a byte every few seconds, then a connect-and-close flood of the
socket's listen queue. Meanwhile another user's cmsub and a real resume (SlurmUser's hook,
handled by a cycle that launches in the fake cloud) must complete in their usual time, and
the heartbeat must go on (docs/security.md, section staging; docs/staging.md "Limits").

cm-scale runs as a site runs it (tests/security/statelab.py), with the descriptor limit
the unit had before it set LimitNOFILE (1024), so the caps and the reserve, not a generous
limit, are what holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.config import load_settings
from tests.conftest import EXAMPLE_CONFIG, REPO
from tests.security.conftest import Account, Accounts, as_user
from tests.security.statelab import BIN, StateLab, state_lab
from tests.security.test_staging import make_tree

pytestmark = pytest.mark.security

REQUEST_TIMEOUT_S = 5
NOFILE = 1024  # cm-scale's descriptor limit: systemd's default soft limit
STAGING = f"""
[staging]
data_mover_partition = "movers"
quota_bytes = 100000000
transfer_command = "{BIN / "cmsub-transfer"}"
socket = "{{base}}/run/cmsub.sock"
request_timeout_s = {REQUEST_TIMEOUT_S}
[[staging.regions]]
provider = "aws1"
partition = "gpu"
rsync_target = "{{base}}/staging"
"""
# cmsub's Slurm (the edge of the world): sbatch prints a job id, scontrol only releases
# (the daemon's own scontrol calls fail as they do without one), scancel does nothing
SLURM_FOR_CMSUB = {
    "sbatch": '#!/bin/sh\necho "$$;sec"\n',
    "scontrol": '#!/bin/sh\n[ "$1" = release ] && exit 0\necho "stand-in" >&2\nexit 1\n',
    "scancel": "#!/bin/sh\nexit 0\n",
}
# mallory's idle connections: COUNT of them, a byte on each every 2 s; those the service
# closed are opened again (a queue that is full at that moment is tried next round)
IDLE = """
import resource, socket, sys, time
_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
path, count = sys.argv[1], int(sys.argv[2])
held, made = [], 0
def fill():
    global made
    while len(held) < count:
        s = socket.socket(socket.AF_UNIX)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            return
        held.append(s)
        made += 1
fill()
while made < count:
    time.sleep(0.05)
    fill()
print("holding", len(held), flush=True)
while True:
    time.sleep(2)
    alive = []
    for s in held:
        try:
            s.send(b" ")
            alive.append(s)
        except OSError:
            s.close()
    held[:] = alive
    fill()
"""
# mallory's flood: WORKERS processes connecting and closing as fast as they can
FLOOD = """
import os, socket, sys
path, workers = sys.argv[1], int(sys.argv[2])
for _ in range(workers - 1):
    if os.fork() == 0:
        break
while True:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
    except OSError:
        pass
    s.close()
"""


@pytest.fixture(scope="module")
def lab(accounts: Accounts) -> Iterator[StateLab]:
    with state_lab(
        accounts.slurm.name, accounts.admins_group, extra_config=STAGING, nofile=NOFILE
    ) as running:
        (running.base / "staging").mkdir(mode=0o755)
        for name, text in SLURM_FOR_CMSUB.items():
            path = running.base / "slurm-bin" / name
            path.write_text(text)
            path.chmod(0o755)
        running.wait_for("the staging socket", lambda: socket_of(running).exists(), 10)
        synced = running.clustermgr("nodes", "sync", "--no-slurm")  # the template's slots
        assert synced.returncode == 0, synced.stderr
        yield running


def socket_of(lab: StateLab) -> Path:
    return lab.base / "run" / "cmsub.sock"


@contextlib.contextmanager
def attacking(user: Account, script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`script` running as `user` in its own process group, killed (the group) on exit."""
    attack = subprocess.Popen(
        ["runuser", "-u", user.name, "--", sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
        start_new_session=True,
    )
    try:
        yield attack
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(attack.pid, signal.SIGKILL)
        attack.wait(timeout=30)


def cmsub_takes(lab: StateLab, user: Account, where: Path) -> float:
    """Seconds alice's cmsub takes to submit her chain (asserting it did)."""
    started = time.monotonic()
    done = as_user(
        user.name,
        [
            str(BIN / "cmsub"),
            "--stage-in",
            f"{where / 'data'}:input",
            "--json",
            str(where / "job.sh"),
        ],
        env={"CLUSTERMGR_CONFIG": str(lab.config)},
        timeout=120,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stage_id"]
    return took


def resume_takes(lab: StateLab, slurm: Account, node: str) -> float:
    """Seconds from SlurmUser's resume hook to the cycle's launch reaching the cloud."""
    before = lab.cloud_changes()
    started = time.monotonic()
    hook = as_user(
        slurm.name,
        [str(BIN / "clustermgr-slurm-resume"), node],
        env={"CLUSTERMGR_CONFIG": str(lab.config)},
    )
    assert hook.returncode == 0, hook.stderr
    lab.wait_for(f"the launch of {node}", lambda: lab.cloud_changes() > before, 60)
    return time.monotonic() - started


def heartbeat_age(lab: StateLab) -> float:
    return time.time() - (lab.state / "heartbeat.json").stat().st_mtime


def free_descriptors(lab: StateLab) -> int:
    """What cm-scale has left of its descriptor limit, seen from outside (as root)."""
    assert lab.daemon is not None
    return NOFILE - len(os.listdir(f"/proc/{lab.daemon.pid}/fd"))


def usual(baseline: float) -> float:
    """What still counts as the usual time on a shared 2-core machine whose attacker burns
    CPU: three times the quiet run, and a few seconds of scheduling noise."""
    return 3 * baseline + 5


def test_idle_connections_and_a_flood_starve_neither_cmsub_nor_the_cycle(
    lab: StateLab, accounts: Accounts, alice_dir: Path
) -> None:
    alice, mallory, slurm = accounts.victim, accounts.attacker, accounts.slurm
    make_tree(alice, alice_dir)
    quiet_cmsub = cmsub_takes(lab, alice, alice_dir)
    quiet_resume = resume_takes(lab, slurm, "cloud1")
    path = str(socket_of(lab))

    with attacking(mallory, IDLE, path, "1000") as idle:
        assert idle.stdout is not None
        assert idle.stdout.readline().strip() == "holding 1000"
        # the service holds at most max_connections_per_caller of hers: the descriptors
        # the cycle needs are still there (without the caps she held a thousand of them)
        assert free_descriptors(lab) > NOFILE - 100, free_descriptors(lab)
        attacked_cmsub = cmsub_takes(lab, alice, alice_dir)
        attacked_resume = resume_takes(lab, slurm, "cloud2")
        assert attacked_cmsub < usual(quiet_cmsub), (quiet_cmsub, attacked_cmsub)
        assert attacked_resume < usual(quiet_resume), (quiet_resume, attacked_resume)
        assert heartbeat_age(lab) < 6  # written every 0.5 s here (interval_s / 2)
        time.sleep(2 * REQUEST_TIMEOUT_S)  # her admitted ones reach their deadline
        lab.keeps_cycling()

    with attacking(mallory, FLOOD, path, "4"):
        time.sleep(2)
        flooded_cmsub = cmsub_takes(lab, alice, alice_dir)
        flooded_resume = resume_takes(lab, slurm, "cloud3")
        assert flooded_cmsub < usual(quiet_cmsub), (quiet_cmsub, flooded_cmsub)
        assert flooded_resume < usual(quiet_resume), (quiet_resume, flooded_resume)
        assert heartbeat_age(lab) < 6
        lab.keeps_cycling()

    print(
        f"cmsub {quiet_cmsub:.2f} s quiet, {attacked_cmsub:.2f} s idle-attacked, "
        f"{flooded_cmsub:.2f} s flooded; resume {quiet_resume:.2f} / {attacked_resume:.2f} / "
        f"{flooded_resume:.2f} s"
    )
    output = lab.output()
    assert "Too many open files" not in output and "EMFILE" not in output
    mallorys = f"of uid {mallory.uid}:"
    warned = [line for line in output.splitlines() if mallorys in line]
    assert warned, output[-3000:]
    # once per episode (until all her connections ended), never once per connection
    dropped = sum(
        int(n) for n in re.findall(rf"uid {mallory.uid}'s connections have ended; (\d+)", output)
    )
    print(f"{len(warned)} warnings for {dropped} dropped connections of mallory's")
    assert dropped > 1000 and len(warned) * 50 < dropped, (len(warned), dropped)
    assert f"of uid {alice.uid}" not in output  # alice was never refused


def test_the_unit_leaves_room_for_the_cycle_above_the_staging_caps() -> None:
    unit = (REPO / "etc" / "systemd" / "cm-scale.service").read_text()
    limits = re.findall(r"^LimitNOFILE=(\d+)$", unit, re.MULTILINE)
    staging = load_settings(EXAMPLE_CONFIG).staging
    assert len(limits) == 1
    held_by_staging = staging.max_connections + staging.descriptor_reserve
    assert int(limits[0]) >= 4 * held_by_staging  # the cycle's own, with room to spare

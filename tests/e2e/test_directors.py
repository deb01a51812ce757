"""The local region's director, end to end with a real slurmctld (issues 11 and 23): `alice`,
a user only the head's LDAP holds, submits a job on the head (whose slurmctld resolves
users from that LDAP); cm-scale launches the director first, syncs its image and LDAP
replica, and only then the burst node, which is set up by its user-data alone (the image's
cloud-config, carried out by the local provider: /home from the head, /opt/site from the
director's copy of the image, users from the director's replica through nslcd, then
slurmd). The job, on that node, runs a program from /opt/site, writes to alice's home on
the shared mount, and `id` there says what it says on the head. Then the director's
processes and namespace are killed: it is LOST, a second job stays pending with no burst
node launched until a new director is READY, and then it runs the same way.
(A new image revision replacing old nodes: tests/e2e/test_image_revisions.py.)

Driven by repeated `cm-scale --once` (which runs the director pass after the cycle, its
syncs inline) in policy mode. Run it alone, as root, on a machine with Slurm, slapd and
rsync (it starts slurmctld):

    .venv/bin/pytest -p no:cacheprovider tests/e2e/test_directors.py
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from clustermgr.directors.states import director_name
from clustermgr.providers.local import net
from clustermgr.providers.local.client import state_dir_of
from clustermgr.providers.local.state import locked
from tests.conftest import cannot_run
from tests.labs.burstlab import BurstLab, BurstLabSpec
from tests.labs.directorlab import (
    HELLO,
    director_tables,
    head_launcher,
    make_head,
    unavailable,
)
from tests.services.slapd import Slapd, SlapdUnavailable, make_tls

SUBNET = "10.213.21.0/24"
NAME = director_name("local", "here")
TEMPLATE = "local-gpu"
ALICE_UID = 20001


@pytest.fixture
def lab(lab_dir: Path) -> Iterator[tuple[BurstLab, Slapd]]:
    why = unavailable() or next(
        (f"{tool} is not installed" for tool in ("nslcd", "setpriv") if not shutil.which(tool)),
        "",
    )
    if not why and not Path("/etc/nslcd.conf").exists():
        why = "no /etc/nslcd.conf (install nslcd and libnss-ldapd)"
    if why:
        cannot_run(f"director end-to-end test cannot run: {why}")
    head_address = net.Subnet.parse(SUBNET).host_address  # the bridge's: namespaces reach it
    head = make_head(lab_dir / "head", head_address)
    # the director's certificate names every address it may get on the subnet
    addresses = net.Subnet.parse(SUBNET).instance_addresses()
    tls = make_tls(lab_dir / "tls", *addresses)
    tables = director_tables(
        lab_dir, head, base_image="local.gpu2", boot_timeout_s=60, node_image=True, tls=tls
    )
    home = lab_dir / "home"  # what the head exports as /home
    (home / "alice").mkdir(parents=True)
    os.chown(home / "alice", ALICE_UID, ALICE_UID)
    (home / "alice").chmod(0o700)
    spec = BurstLabSpec(
        subnet=SUBNET,
        image="base",
        extra_toml=tables,
        nfs_stand_in={f"{head_address}:/home": str(home)},
        controller_launcher=head_launcher(lab_dir / "head-nss", head, home),
    )
    burst = BurstLab(lab_dir, spec)
    try:
        net.ensure_bridge_for(net.Subnet.parse(SUBNET))  # the head slapd listens on it
        try:
            head.start()  # before slurmctld, which resolves users from it
        except SlapdUnavailable as exc:
            cannot_run(str(exc))
        burst.start()
        yield burst, head
    finally:
        burst.stop()
        head.destroy()


def directors(lab: BurstLab) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(lab.clustermgr("directors", "list", "--json").stdout)
    return rows


def director(lab: BurstLab) -> dict[str, Any]:
    [row] = directors(lab)
    assert row["name"] == NAME
    return row


def burst_instances(lab: BurstLab) -> list[dict[str, Any]]:
    return [i for i in lab.instances() if i["template"] == TEMPLATE]


JOB = """#!/bin/sh
set -e
echo "id: $(id)"
/opt/site/bin/hello
home=$(getent passwd "$(id -un)" | cut -d: -f6)
echo "written by $(id -un) on $SLURMD_NODENAME" >"$home/out-$SLURM_JOB_ID"
grep CLUSTERMGR_DIRECTOR= /etc/clustermgr/node.env
"""


def on_head(lab: BurstLab, *argv: str, uid: int = 0) -> str:
    """Run `argv` on the head (slurmctld's mount namespace: its users from the head's
    LDAP), as `uid`."""
    assert lab.lab is not None and lab.lab.pid is not None
    user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--init-groups"] if uid else []
    done = subprocess.run(
        ["nsenter", f"--mount=/proc/{lab.lab.pid}/ns/mnt", "--", *user, *argv],
        capture_output=True, text=True, env=lab.env, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


def submit_as_alice(lab: BurstLab) -> str:
    script = lab.workdir / "as-alice.sh"
    script.write_text(JOB)
    script.chmod(0o755)
    out = on_head(
        lab, "sbatch", "--parsable", "-p", lab.spec.partition, "--chdir=/home/alice",
        "--output=/home/alice/job-%j.out", str(script), uid=ALICE_UID,
    )  # fmt: skip
    return out.strip().split(";")[0]


def check_alice_ran(lab: BurstLab, job: str) -> None:
    """What alice sees of her job: it ran as she is on the head, ran the site's program
    and wrote to her home, which the head reads."""
    home = lab.workdir / "home" / "alice"
    output = (home / f"job-{job}.out").read_text()
    on_the_head = on_head(lab, "id", "alice").strip()
    assert on_the_head == (
        "uid=20001(alice) gid=20001(alice) groups=20001(alice),30001(gpu-users)"
    ), on_the_head
    assert f"id: {on_the_head}\n" in output, output
    assert f"{HELLO} on cloud" in output, output
    assert f"CLUSTERMGR_DIRECTOR={director(lab)['address']}" in output, output
    written = home / f"out-{job}"
    assert written.read_text().startswith("written by alice on cloud"), written.read_text()
    assert (written.stat().st_uid, written.stat().st_gid) == (ALICE_UID, ALICE_UID)


def stamp(text: str) -> datetime:
    """An event time as naive UTC (SQLite hands back naive UTC, PostgreSQL aware)."""
    at = datetime.fromisoformat(text)
    return at if at.tzinfo is None else at.astimezone(UTC).replace(tzinfo=None)


def job_state(lab: BurstLab, job: str) -> str:
    return lab.job_field(job, "JobState")


def kill_director(lab: BurstLab) -> str:
    """Kill the director's processes and remove its namespace (a VM that died); returns
    its instance id. The provider's record stays: the cloud lists it in error."""
    instance_id = director(lab)["instance_id"]
    state_dir = state_dir_of(lab.provider_settings())
    with locked(state_dir, exclusive=False) as state:
        rec = state.instances[instance_id]
    net.stop_instances({instance_id: (rec.pid or 0, rec.pid_start)})
    net.delete_network(instance_id)
    return str(instance_id)


def test_the_director_comes_first_serves_the_burst_node_and_is_replaced(
    lab: tuple[BurstLab, Slapd],
) -> None:
    burst, _head = lab
    host_name = socket.gethostname()
    first = submit_as_alice(burst)

    def first_done() -> bool:
        if burst_instances(burst):  # a burst node only ever after its director is READY
            assert director(burst)["state"] == "ready", director(burst)
        return job_state(burst, first) == "COMPLETED"

    burst.run_until(first_done, timeout_s=300)
    check_alice_ran(burst, first)
    # the node's boot renamed and wrote only its own copies, never this machine's
    assert socket.gethostname() == host_name
    assert not Path("/usr/local/sbin/clustermgr-bootstrap").exists()
    assert not Path("/opt/site").exists()
    ready = director(burst)
    assert (ready["state"], ready["ldap_state"]) == ("ready", "ok")
    assert "verified" in ready["image_state"]
    events = json.loads(burst.clustermgr("events", "--since", "1h", "--json").stdout)
    node_booted = min(stamp(e["at"]) for e in events if e["new_state"] == "BOOTING")
    shown = json.loads(burst.clustermgr("directors", "show", NAME, "--json").stdout)
    ready_at = min(stamp(e["at"]) for e in shown["events"] if e["new_state"] == "ready")
    assert ready_at < node_booted  # the director was READY before the burst node launched
    [image] = json.loads(burst.clustermgr("images", "status", "--json").stdout)
    assert (image["director"], image["state"]) == (NAME, "verified")
    [ldap] = json.loads(burst.clustermgr("ldap", "status", "--json").stdout)
    assert (ldap["director"], ldap["state"]) == (NAME, "ok")

    # the burst node goes (idle_timeout); the director stays (no idle_stop_after_s)
    burst.run_until(lambda: burst_instances(burst) == [], timeout_s=180, pause_s=3)
    assert director(burst)["state"] == "ready"

    # the director dies: the next pass finds it LOST (and, with no demand, retires it)
    killed = kill_director(burst)
    burst.cm_scale_once()
    shown = json.loads(burst.clustermgr("directors", "show", NAME, "--json").stdout)
    assert ("ready", "lost") in [(e["old_state"], e["new_state"]) for e in shown["events"]]
    assert director(burst)["state"] in ("lost", "stopped")

    # a job for the region: a new director first; no burst node, the job pending, meanwhile
    second = submit_as_alice(burst)
    waited = 0
    deadline = time.monotonic() + 300
    while director(burst)["state"] != "ready":
        assert time.monotonic() < deadline, burst.diagnosis()
        summary = burst.cm_scale_once().stdout
        if director(burst)["state"] != "ready":
            waited += 1
            assert burst_instances(burst) == [], (director(burst), summary)
            assert job_state(burst, second) == "PENDING"
            assert f"waiting for director {NAME}" in summary, summary
        time.sleep(1)
    assert waited >= 1 and burst_instances(burst) == []
    assert director(burst)["instance_id"] != killed

    burst.run_until(lambda: job_state(burst, second) == "COMPLETED", timeout_s=300)
    check_alice_ran(burst, second)

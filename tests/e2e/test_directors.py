"""The local region's director, end to end with a real slurmctld (issue 11): a job makes
cm-scale launch the director first, sync its image and LDAP replica, and only then the
burst node; the job, running in the burst node's namespace, resolves `alice` (a user only
the head's LDAP holds) through the director's slapd and reads a file of the image from the
director's rsync module. Then the director's processes and namespace are killed: it is
LOST, a second job stays pending with no burst node launched until a new director is READY,
and then it runs.

Driven by repeated `cm-scale --once` (which runs the director pass after the cycle, its
syncs inline) in policy mode. Run it alone, as root, on a machine with Slurm, slapd and
rsync (it starts slurmctld):

    .venv/bin/pytest -p no:cacheprovider tests/e2e/test_directors.py
"""

from __future__ import annotations

import json
import shutil
import sys
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
from tests.labs.directorlab import MOTD, director_tables, make_head, unavailable
from tests.services.slapd import SUFFIX, Slapd, SlapdUnavailable

SUBNET = "10.213.21.0/24"
NAME = director_name("local", "here")
TEMPLATE = "local-gpu"


@pytest.fixture
def lab(lab_dir: Path) -> Iterator[tuple[BurstLab, Slapd]]:
    why = unavailable()
    if why:
        cannot_run(f"director end-to-end test cannot run: {why}")
    head_address = net.Subnet.parse(SUBNET).host_address  # the bridge's: namespaces reach it
    head = make_head(lab_dir / "head", head_address)
    tables = director_tables(lab_dir, head, base_image="local.gpu2", boot_timeout_s=60)
    spec = BurstLabSpec(subnet=SUBNET, extra_toml=tables)
    burst = BurstLab(lab_dir, spec)
    try:
        burst.start()  # makes the bridge the head slapd listens on
        try:
            head.start()
        except SlapdUnavailable as exc:
            cannot_run(str(exc))
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


def tool(name: str) -> str:
    return shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin") or name


def check_job(lab: BurstLab) -> Path:
    """A job that finds the director's address, looks alice up through its slapd and
    copies the image's file from its rsync module, from the burst node's namespace."""
    script = lab.workdir / "check-director.sh"
    clustermgr = Path(sys.executable).parent / "clustermgr"
    script.write_text(f"""#!/bin/sh
set -e
address=$('{clustermgr}' --config '{lab.config_path}' directors list --json \\
  | '{sys.executable}' -c 'import json,sys; print(json.load(sys.stdin)[0]["address"])')
echo "director=$address node=$SLURMD_NODENAME"
ip -o -4 addr show dev eth0 || true
'{tool("ldapsearch")}' -x -LLL -H "ldap://$address" -b '{SUFFIX}' uid=alice uidNumber
copy="{lab.workdir}/motd-$SLURM_JOB_ID"
'{tool("rsync")}' "rsync://$address/clustermgr-images/base/etc/motd" "$copy"
echo "motd: $(cat "$copy")"
""")
    script.chmod(0o755)
    return script


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
    script = check_job(burst)
    first = burst.sbatch(str(script))

    def first_done() -> bool:
        if burst_instances(burst):  # a burst node only ever after its director is READY
            assert director(burst)["state"] == "ready", director(burst)
        return job_state(burst, first) == "COMPLETED"

    burst.run_until(first_done, timeout_s=300)
    output = burst.job_output(first)
    assert f"dn: uid=alice,ou=people,{SUFFIX}" in output and "uidNumber: 20001" in output, output
    assert f"motd: {MOTD.strip()}" in output, output
    ready = director(burst)
    assert f"director={ready['address']}" in output and "node=cloud" in output
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
    second = burst.sbatch(str(script))
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
    output = burst.job_output(second)
    assert "uidNumber: 20001" in output and f"motd: {MOTD.strip()}" in output, output
    assert f"director={director(burst)['address']}" in output

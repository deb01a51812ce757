"""Takeover mid-burst: two cm-scale daemons (two head nodes, one PostgreSQL, the AWS SDK
over moto, a real slurmctld and real slurmd behind every instance). The leader is killed
with SIGKILL while its launch is binding instances to nodes; the standby takes the lock,
reconciles what the leader left (instances launched, none bound), and finishes the burst:
every job completes, no instance is launched twice, none is left behind."""

from __future__ import annotations

import json
import os
import signal
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import tomli_w

from tests.labs.cloudlab import CloudLab, LabOptions, cloud_lab

INTERVAL_S = 2.0
TASKS = 3
LEASE_S = 6.0


def standby_config(lab: CloudLab) -> Path:
    """The second head node: the same cluster and database, its own state directory."""
    config = tomllib.loads(lab.config_path.read_text())
    config["daemon"]["state_dir"] = str(lab.workdir / "state-standby")
    config["daemon"]["metrics_port"] = 0
    path = lab.workdir / "standby.toml"
    path.write_text(tomli_w.dumps(config))
    return path


def roles(lab: CloudLab) -> dict[int, str]:
    status = json.loads(lab.clustermgr("status", "--json", check=False).stdout)
    return {int(d["pid"]): str(d["role"]) for d in status["daemons"]}


def first_cycle_after(log: Path, since: float) -> float | None:
    """The time of the first cycle line logged at or after `since` (epoch seconds)."""
    for line in log.read_text(errors="replace").splitlines():
        if " cm-scale: cycle: " not in line:
            continue
        at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
        if at.timestamp() >= since:
            return at.timestamp()
    return None


def test_the_standby_finishes_a_burst_whose_leader_was_killed_mid_launch(
    lab_dir: Path, postgres_url: str
) -> None:
    options = LabOptions(interval_s=INTERVAL_S, database={"url": postgres_url})
    with cloud_lab(lab_dir, "aws", options) as lab:
        fake = lab.harness.fake  # type: ignore[attr-defined]
        standby_log = lab.workdir / "standby.log"
        with lab.daemon() as leader:
            lab.wait("the leader to lead", lambda: roles(lab).get(leader.pid) == "leader", 30)
            with lab.daemon(standby_config(lab), "standby.log") as standby:
                lab.wait("the standby", lambda: roles(lab).get(standby.pid) == "standby", 30)
                fake.slow(30, attempts=1, actions=["CreateTags"])  # binding hangs
                array = lab.submit(f"--array=1-{TASKS}", "--exclusive", "--wrap", "sleep 1")
                lab.wait(
                    "the leader's launch to reach binding",
                    lambda: fake.calls().get("CreateTags", 0) >= 1,
                    60,
                )
                os.killpg(leader.pid, signal.SIGKILL)  # as systemd kills the unit's cgroup
                killed_at = time.time()
                leader.wait(10)
                lab.wait(
                    "the standby's first cycle",
                    lambda: first_cycle_after(standby_log, killed_at) is not None,
                    30,
                )
                took = (first_cycle_after(standby_log, killed_at) or 0) - killed_at
                print(f"takeover: {took:.2f} s ({took / INTERVAL_S:.2f} cycles)")
                assert took < 2 * INTERVAL_S + 1, took
                fake.clear_faults()

                def done() -> bool:
                    states = [lab.job(f"{array}_{i}", "JobState") for i in range(1, TASKS + 1)]
                    return all(s == "COMPLETED" for s in states)

                lab.wait("every task to complete", done, 180)
                assert standby.poll() is None
                lab.wait("the idle nodes' instances terminated", lambda: lab.instances() == [], 120)
        ec2 = lab.harness.client()  # type: ignore[attr-defined]
        made = [
            i["InstanceId"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        ]
        # the leader's instances were adopted by the standby, not launched a second time
        assert len(made) == TASKS, made
        launched = json.loads(lab.clustermgr("status", "--json", check=False).stdout)[
            "instances_launched"
        ]
        assert launched == TASKS
        log = standby_log.read_text()
        assert "Traceback" not in log, log[-3000:]


def test_a_frozen_leader_is_replaced_when_its_lease_runs_out_and_cannot_act_after_it_wakes(
    lab_dir: Path, postgres_url: str
) -> None:
    """SIGSTOP on the leader while its launch is binding instances (its database sessions
    stay open, its advisory lock held): the standby takes the lease within two cycles of
    its end, adopts the instances and finishes the burst. Woken by SIGCONT mid-launch, the
    old leader makes no further cloud call and writes nothing: it stands by."""
    options = LabOptions(
        interval_s=INTERVAL_S, database={"url": postgres_url}, daemon={"lease_s": LEASE_S}
    )
    with cloud_lab(lab_dir, "aws", options) as lab:
        fake = lab.harness.fake  # type: ignore[attr-defined]
        leader_log, standby_log = lab.workdir / "cm-scale.log", lab.workdir / "standby.log"
        with lab.daemon() as leader:
            lab.wait("the leader to lead", lambda: roles(lab).get(leader.pid) == "leader", 30)
            with lab.daemon(standby_config(lab), "standby.log") as standby:
                lab.wait("the standby", lambda: roles(lab).get(standby.pid) == "standby", 30)
                fake.slow(20, attempts=1, actions=["CreateTags"])  # binding hangs
                array = lab.submit(f"--array=1-{TASKS}", "--exclusive", "--wrap", "sleep 1")
                lab.wait(
                    "the leader's launch to reach binding",
                    lambda: fake.calls().get("CreateTags", 0) >= 1,
                    60,
                )
                os.killpg(leader.pid, signal.SIGSTOP)
                frozen_at = time.time()
                try:
                    lab.wait(
                        "the standby's first cycle",
                        lambda: first_cycle_after(standby_log, frozen_at) is not None,
                        LEASE_S + 4 * INTERVAL_S + 30,
                    )
                    took = (first_cycle_after(standby_log, frozen_at) or 0) - frozen_at
                    print(f"takeover after a freeze: {took:.2f} s (lease {LEASE_S} s)")
                    # the lease ran out at most LEASE_S after the freeze
                    assert took <= LEASE_S + 2 * INTERVAL_S + 1, took
                    lab.wait(
                        "the frozen head to show stale",
                        lambda: roles(lab).get(leader.pid) == "stale",
                        30,
                    )
                    shown = roles(lab)
                    assert shown[standby.pid] == "leader", shown
                    assert list(shown.values()).count("leader") == 1, shown
                finally:
                    os.killpg(leader.pid, signal.SIGCONT)
                woken_at = time.time()
                lab.wait(
                    "the woken leader to see it lost the lease",
                    lambda: "lost the leader lease" in leader_log.read_text(errors="replace"),
                    60,
                )
                fake.clear_faults()

                def done() -> bool:
                    states = [lab.job(f"{array}_{i}", "JobState") for i in range(1, TASKS + 1)]
                    return all(s == "COMPLETED" for s in states)

                lab.wait("every task to complete", done, 180)
                assert leader.poll() is None and standby.poll() is None
                assert first_cycle_after(leader_log, woken_at) is None  # it never led again
                shown = roles(lab)
                assert shown == {leader.pid: "standby", standby.pid: "leader"}, shown
                lab.wait("the idle nodes' instances terminated", lambda: lab.instances() == [], 120)
                events = json.loads(
                    lab.clustermgr("events", "--cluster", "--json", "--limit", "1000").stdout
                )
        ec2 = lab.harness.client()  # type: ignore[attr-defined]
        made = [
            i["InstanceId"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        ]
        assert len(made) == TASKS, made  # adopted, never launched a second time
        woken = leader_log.read_text(errors="replace")
        assert "Traceback" not in woken, woken[-3000:]
        assert "Traceback" not in standby_log.read_text()
        sources = {(e["kind"], e["source"].rsplit(":", 1)[-1]) for e in events}
        assert ("takeover", str(standby.pid)) in sources, sources
        assert ("lease-lost", str(leader.pid)) in sources, sources
        # nothing the old leader wrote after it woke: its last cycle event is older
        its_cycles = [
            e for e in events if e["kind"] == "cycle" and e["source"].endswith(f":{leader.pid}")
        ]
        assert all(
            datetime.fromisoformat(e["at"]).replace(tzinfo=UTC).timestamp() < woken_at
            for e in its_cycles
        ), its_cycles

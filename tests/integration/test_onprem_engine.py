"""The scaling engine on an on-prem template, against real BMC emulators (ipmi_sim through
ipmitool, sushy-emulator through sushy) and a real database; no Slurm.

Slurm is the edge of the world here: `ScriptedSlurm` answers the engine's snapshot with the
node states a test sets (as sinfo would show them) and records what the engine told it.
What is real: the config, the database and its node history, the engine's observe /
reconcile / policies / clamp / act path, the ipmi and redfish providers, and the BMCs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from clustermgr.config import Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, Node, NodeEvent
from clustermgr.nodes.inventory import sync_nodes
from clustermgr.nodes.states import NodeState
from clustermgr.providers.registry import make_provider
from clustermgr.scaling.engine import Engine
from clustermgr.scaling.onprem import power_saved_kw
from clustermgr.workload.base import PendingJob, WorkloadNode, WorkloadSnapshot
from tests.conftest import run_cli
from tests.integration.test_bmc_providers import (
    CLUSTER,
    LONE,
    NODES,
    USER,
    Lab,
    running_lab,
    wait_until,
)
from tests.unit.test_policies import job

TEMPLATE = "rack"


@dataclass
class ScriptedSlurm:
    """Slurm as the test scripts it: nodes and pending jobs, and the calls the engine made."""

    nodes: dict[str, WorkloadNode]
    pending: list[PendingJob] = field(default_factory=list)
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # the reasons of `set_down`
    # node -> base state Slurm moves it to right after it answered the next snapshot (a job
    # placed there while the engine acts on that snapshot)
    after_snapshot: dict[str, str] = field(default_factory=dict)

    def snapshot(self) -> WorkloadSnapshot:
        taken = WorkloadSnapshot(datetime.now(UTC), dict(self.nodes), tuple(self.pending))
        for name, state in self.after_snapshot.items():
            self.show(name, state)
        self.after_snapshot = {}
        return taken

    def node_states(self) -> dict[str, WorkloadNode]:
        return dict(self.nodes)

    def config_values(self) -> dict[str, str]:
        return {"SLURM_VERSION": "22.05.8"}

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        self.calls.append(("set_addresses", tuple(sorted(addresses))))

    def power_up(self, nodes: Sequence[str]) -> None:
        self.calls.append(("power_up", tuple(nodes)))

    def power_down(self, nodes: Sequence[str], reason: str, force: bool = False) -> None:
        self.calls.append(("power_down_force" if force else "power_down", tuple(nodes)))

    def set_down(self, nodes: Sequence[str], reason: str) -> None:
        self.calls.append(("down", tuple(nodes)))
        self.reasons.update(dict.fromkeys(nodes, reason))

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        self.calls.append(("drain", tuple(nodes)))

    def undrain(self, nodes: Sequence[str]) -> None:
        self.calls.append(("undrain", tuple(nodes)))

    def comment_jobs(self, jobs: Sequence[str], text: str) -> None:
        self.calls.append(("comment", tuple(jobs)))

    def show(self, name: str, state: str, *flags: str) -> None:
        self.nodes[name] = replace(self.nodes[name], state=state, flags=frozenset(flags))


@dataclass
class World:
    lab: Lab
    settings: Settings
    db: Database
    slurm: ScriptedSlurm
    now: datetime

    def engine(self) -> Engine:
        providers = {"rack1": make_provider(self.settings.provider("rack1"), CLUSTER)}
        return Engine(self.settings, self.db, self.slurm, providers, clock=lambda: self.now)

    def state(self, name: str) -> NodeState:
        with self.db.session() as session:
            node = session.scalars(select(Node).where(Node.name == name)).one()
            return NodeState(node.state)

    def history(self, name: str) -> list[tuple[str, str]]:
        with self.db.session() as session:
            node = session.scalars(select(Node).where(Node.name == name)).one()
            events = session.scalars(
                select(NodeEvent).where(NodeEvent.node_id == node.id).order_by(NodeEvent.id)
            )
            return [(e.new_state, e.reason) for e in events]


def config(lab: Lab, tmp: Path, **provider_settings: Any) -> dict[str, Any]:
    settings = lab.settings(**provider_settings)
    provider = settings.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    provider["name"] = "rack1"
    return {
        "cluster": {"name": CLUSTER},
        "daemon": {"state_dir": str(tmp / "state")},
        "providers": [provider],
        "templates": [
            {
                "name": TEMPLATE,
                "provider": "rack1",
                "partition": "gpu",
                "nodes": ",".join(NODES),
                "instance_types": ["onprem"],
                "image": "-",
                "cpus": 2,
                "memory_mb": 1000,
                "boot_timeout_s": 300,
                "idle_kw": 2.5,
            }
        ],
        "policy": {
            "chain": [
                {"name": "onprem_first", "options": {"minutes": 15}},
                {"name": "queue_depth"},
                {"name": "idle_timeout", "options": {"minutes": 10}},
            ]
        },
    }


@pytest.fixture(params=["ipmi", "redfish"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    with running_lab(request.param, tmp_path) as lab:
        settings = parse_settings(config(lab, tmp_path), "test")
        db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
        db.upgrade()
        off = frozenset({"POWERED_DOWN"})
        slurm = ScriptedSlurm(
            {
                name: WorkloadNode(name, "IDLE", off, cpus=2, memory_mb=1000, partitions=("gpu",))
                for name in NODES
            }
        )
        now = datetime.now(UTC)
        with db.session() as session:
            sync_nodes(session, settings, slurm.nodes, now)
        yield World(lab, settings, db, slurm, now)


def gpu_job(job_id: str) -> PendingJob:
    return job(job_id, partition="gpu", cpus_per_node=1, gpus_per_node=0, memory_per_node_mb=100)


def test_a_pending_job_powers_a_node_on_and_idling_powers_it_off_safely(world: World) -> None:
    node, lab, slurm = NODES[0], world.lab, world.slurm
    slurm.pending = [gpu_job("1")]
    report = world.engine().cycle()
    assert report.error is None, report.error
    assert report.launched == [node]  # onprem_first asked for one powered-off node
    assert world.state(node) is NodeState.BOOTING
    wait_until(lambda: lab.power(node) == "on", what=f"{node} powered on")
    assert [lab.power(n) for n in NODES[1:]] == ["off", "off"]
    assert not any(
        name == "set_addresses" and node in nodes for name, nodes in slurm.calls
    )  # its NodeAddr is fixed in slurm.conf: never told

    slurm.pending = []
    slurm.show(node, "IDLE")  # slurmd registered
    world.now += timedelta(seconds=60)
    world.engine().cycle()
    assert world.state(node) is NodeState.UP

    slurm.show(node, "ALLOCATED")  # a job runs: idle_timeout leaves it alone
    world.now += timedelta(minutes=30)
    world.engine().cycle()
    assert world.state(node) is NodeState.UP and lab.power(node) == "on"

    slurm.show(node, "IDLE")
    world.engine().cycle()  # idle from now
    world.now += timedelta(minutes=11)
    report = world.engine().cycle()
    assert report.stopped == [node]
    assert world.state(node) is NodeState.STOPPING
    assert ("power_down", (node,)) in slurm.calls
    assert lab.power(node) == "on"  # Slurm still showed it schedulable: not powered off yet

    slurm.show(node, "IDLE", "POWERING_DOWN")  # Slurm's power saving took it out
    world.now += timedelta(seconds=30)
    world.engine().cycle()
    assert world.state(node) is NodeState.POWERED_DOWN
    assert lab.power(node) == "off"
    assert "soft-off" in lab.actions(node)  # a graceful shutdown first
    states = [state for state, _reason in world.history(node)]
    assert states[-5:] == ["LAUNCHING", "BOOTING", "UP", "STOPPING", "POWERED_DOWN"]


def test_an_idle_node_slurm_gives_a_job_while_the_cycle_acts_is_kept_not_powered_off(
    world: World,
) -> None:
    """idle_timeout decided on a snapshot showing the node idle; Slurm placed a job there
    before the stop. The node is drained first and Slurm read again: it has a job, so it is
    not powered down (a POWER_DOWN would requeue that job), its drain is lifted, and the
    next idle spell stops it as usual."""
    node, lab, slurm = NODES[0], world.lab, world.slurm
    slurm.pending = [gpu_job("1")]
    world.engine().cycle()
    wait_until(lambda: lab.power(node) == "on", what=f"{node} powered on")
    slurm.pending = []
    slurm.show(node, "IDLE")
    world.now += timedelta(seconds=60)
    world.engine().cycle()
    assert world.state(node) is NodeState.UP
    world.engine().cycle()  # idle from now
    world.now += timedelta(minutes=11)

    slurm.after_snapshot = {node: "ALLOCATED"}
    report = world.engine().cycle()
    assert report.error is None and report.stopped == [], (report.error, report.stopped)
    assert world.state(node) is NodeState.UP and lab.power(node) == "on"
    assert ("drain", (node,)) in slurm.calls and ("undrain", (node,)) in slurm.calls
    assert not any(name.startswith("power_down") and node in n for name, n in slurm.calls)

    assert world.engine().cycle().stopped == []  # the job runs
    slurm.show(node, "IDLE")  # the job is done
    world.engine().cycle()  # idle from now
    world.now += timedelta(minutes=11)
    assert world.engine().cycle().stopped == [node]
    assert ("power_down", (node,)) in slurm.calls


def test_a_node_whose_bmc_does_not_answer_is_no_capacity_and_saves_no_power(
    world: World,
) -> None:
    silent = LONE  # its BMC serves it alone (a redfish emulator may serve several nodes)
    world.lab.hang(silent)
    engine = world.engine()
    report = engine.cycle()
    assert report.view is not None
    assert report.view.nodes[silent].power_unknown
    assert silent not in report.view.free_slots(TEMPLATE)
    assert power_saved_kw(report.view) == pytest.approx(2 * 2.5)
    world.slurm.pending = [gpu_job("1")]
    report = engine.cycle()
    assert report.launched == [NODES[0]]  # a node whose BMC answers
    assert world.state(silent) is NodeState.POWERED_DOWN


def test_a_node_switched_on_by_hand_is_adopted_then_up(world: World) -> None:
    node = NODES[1]
    world.lab.press_power_button(node)
    wait_until(lambda: world.lab.power(node) == "on", what=f"{node} on by hand")
    world.slurm.show(node, "IDLE")  # its slurmd registered
    world.engine().cycle()
    assert world.state(node) is NodeState.BOOTING
    world.engine().cycle()
    assert world.state(node) is NodeState.UP
    assert world.lab.actions(node).count("on") <= 1  # the engine never powered it on again
    reasons = [reason for _state, reason in world.history(node)]
    assert any("adopted" in reason for reason in reasons)


def test_a_bmc_that_rejects_the_credentials_leaves_its_node_down_with_the_reason(
    world: World, tmp_path: Path
) -> None:
    data = config(world.lab, tmp_path)
    wrong = world.lab.secret_file("lone-bmc.pw", "not-its-pw")
    credentials = {"source": "password_file", "username": USER, "secret_file": str(wrong)}
    for entry in data["providers"][0]["bmc_nodes"]:
        if entry["nodes"] == LONE:  # its BMC serves it alone
            entry["credentials"] = credentials
    world.settings = parse_settings(data, "test")
    slurm = world.slurm
    slurm.pending = [gpu_job("1")]
    report = world.engine().cycle()
    assert report.error is None, report.error
    assert report.view is not None and report.view.nodes[LONE].power_unknown
    assert report.launched == [NODES[0]]  # a node whose BMC takes its credentials
    assert ("down", (LONE,)) in slurm.calls
    reason = slurm.reasons[LONE]
    assert reason.startswith("(Code:AUTH)") and "password from file" in reason  # never what
    assert "not-its-pw" not in reason
    assert world.state(LONE) is NodeState.POWERED_DOWN and world.lab.power(LONE) == "off"
    with world.db.session() as session:
        events = session.scalars(select(ClusterEvent.message).where(ClusterEvent.kind == "fault"))
        assert [e.split(":")[0] for e in events] == [f"{LONE} set DOWN in Slurm"]

    slurm.show(LONE, "DOWN", "POWERED_DOWN")  # as slurmctld then shows it: down~
    slurm.calls.clear()
    world.now += timedelta(seconds=30)
    report = world.engine().cycle()
    assert not [nodes for name, nodes in slurm.calls if LONE in nodes]  # nor DOWN nor a hold
    assert report.view is not None and LONE not in report.view.free_slots(TEMPLATE)


def test_a_node_on_while_slurm_has_it_powered_down_is_switched_off(world: World) -> None:
    node = NODES[1]
    world.lab.press_power_button(node)  # Slurm still shows it idle~: it would never join
    wait_until(lambda: world.lab.power(node) == "on", what=f"{node} on by hand")
    report = world.engine().cycle()
    assert report.error is None, report.error
    wait_until(lambda: world.lab.power(node) == "off", what=f"{node} switched off")
    assert "soft-off" in world.lab.actions(node)  # a graceful shutdown first
    assert world.state(node) is NodeState.POWERED_DOWN
    assert [n for n in NODES if world.lab.power(n) == "on"] == []
    with world.db.session() as session:
        messages = session.scalars(select(ClusterEvent.message).where(ClusterEvent.kind == "power"))
        assert [m.split(":")[0] for m in messages] == [f"powered off {node}"]


ONPREM_TOML = """
[cluster]
name = "onprem-cli"

[[providers]]
name = "rack1"
type = "ipmi"
region = "hall-a"
credentials = { source = "password_file", username = "admin", secret_file = "/nonexistent" }
bmc_nodes = [{ nodes = "gpu-[01-04]", address = "{node}-bmc", instance_type = "dgx" }]

[[templates]]
name = "rack"
provider = "rack1"
partition = "gpu"
nodes = "gpu-[01-04]"
instance_types = ["dgx"]
image = "-"
cpus = 64
memory_mb = 512000
idle_kw = 2.5
min_on = 1

[[providers]]
name = "aws1"
type = "aws"
region = "us-east-1"

[[templates]]
name = "burst"
provider = "aws1"
partition = "cloud"
nodes = "cloud-[1-2]"
instance_types = ["p4d.24xlarge"]
image = "ami-1"
cpus = 64
memory_mb = 512000
"""


def test_nodes_list_shows_power_and_status_the_kw_saved(tmp_path: Path) -> None:
    config_file = tmp_path / "clustermgr.toml"
    config_file.write_text(ONPREM_TOML)
    site = ("--db", f"sqlite:///{tmp_path / 'cm.db'}", "--config", str(config_file))
    assert run_cli(*site, "db", "upgrade").returncode == 0
    assert run_cli(*site, "nodes", "sync", "--no-slurm").returncode == 0
    rows = json.loads(run_cli(*site, "nodes", "list", "--json").stdout)
    assert {(row["name"], row["kind"], row["power"]) for row in rows} == {
        *((f"gpu-0{i}", "onprem", "off") for i in range(1, 5)),  # switched by their BMCs
        ("cloud-1", "cloud", "-"),
        ("cloud-2", "cloud", "-"),
    }
    assert "POWER" in run_cli(*site, "nodes", "list").stdout
    for kind, count in (("onprem", 4), ("cloud", 2)):
        listed = run_cli(*site, "nodes", "list", "--kind", kind, "--json").stdout
        assert [row["kind"] for row in json.loads(listed)] == [kind] * count
    shown = json.loads(run_cli(*site, "nodes", "show", "gpu-01", "--json").stdout)
    assert shown["kind"] == "onprem"
    status = json.loads(run_cli(*site, "status", "--json").stdout)
    assert status["onprem_power"]["saved_kw"] == pytest.approx(4 * 2.5)
    assert "~10.0 kW saved" in run_cli(*site, "status").stdout

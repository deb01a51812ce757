"""On-prem templates (ipmi/redfish providers): config, slurm.conf lines, the power-off rule,
verdict reasons, capacity and the policies, on hand-made data (no Slurm, no BMC)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from clustermgr.cli.status_cmd import power_saved
from clustermgr.config import PolicyRef, Settings, parse_settings
from clustermgr.core.errors import ConfigError
from clustermgr.nodes.states import NodeState, power_of
from clustermgr.policy import ClusterView, NodeView, TemplateView
from clustermgr.providers.base import TAG_FAULT, CloudInstance, InstanceState
from clustermgr.scaling.observe import NodeRecord, Snapshot, template_views
from clustermgr.scaling.onprem import power_facts, power_off_blocked, power_saved_kw
from clustermgr.scaling.projection import build_view
from clustermgr.scaling.reconcile import reconcile
from clustermgr.scaling.verdicts import Verdict
from clustermgr.workload.base import WorkloadNode, WorkloadSnapshot
from clustermgr.workload.slurmconf import check_against_slurm, render_slurm_conf
from tests.unit.test_policies import job, run, template

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def config(template: dict[str, Any] | None = None, **slurm: Any) -> dict[str, Any]:
    onprem = {
        "name": "onprem-a100",
        "provider": "rack1",
        "partition": "gpu",
        "nodes": "gpu-[01-04]",
        "instance_types": ["dgx-a100"],
        "image": "-",
        "cpus": 64,
        "memory_mb": 512000,
        "boot_timeout_s": 600,
        "idle_kw": 2.5,
        "min_on": 1,
        **(template or {}),
    }
    cloud = {
        "name": "aws-a100",
        "provider": "aws1",
        "partition": "gpu-cloud",
        "nodes": "aws-[1-4]",
        "instance_types": ["p4d.24xlarge"],
        "image": "ami-1",
        "cpus": 64,
        "memory_mb": 512000,
    }
    return {
        "cluster": {"name": "c1"},
        "slurm": slurm,
        "providers": [
            {
                "name": "rack1",
                "type": "ipmi",
                "region": "hall-a",
                "credentials": {
                    "source": "password_file",
                    "username": "admin",
                    "secret_file": "/x",
                },
                "bmc_nodes": [
                    {"nodes": "gpu-[01-04]", "address": "{node}-bmc", "instance_type": "dgx-a100"}
                ],
            },
            {"name": "aws1", "type": "aws", "region": "us-east-1"},
        ],
        "templates": [onprem, cloud],
    }


def settings(**change: Any) -> Settings:
    return parse_settings(config(change), "test")


def test_an_on_prem_template_is_accepted_with_its_idle_power_and_nodes_kept_on() -> None:
    parsed = settings()
    onprem = parsed.template("onprem-a100")
    assert (onprem.idle_kw, onprem.min_on, onprem.boot_timeout_s) == (2.5, 1, 600)
    views = template_views(parsed)
    assert views["onprem-a100"].onprem and views["onprem-a100"].min_on == 1
    assert not views["aws-a100"].onprem and views["aws-a100"].idle_kw == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nodes": "gpu-[01-05]"}, "nodes gpu-05 are not in bmc_nodes of provider 'rack1'"),
        ({"instance_types": ["h100"]}, "not hardware classes of provider 'rack1'"),
        ({"market": "spot"}, "market 'spot' is not offered by ipmi"),
        ({"min_on": 5}, "min_on 5 exceeds the 4 nodes"),
    ],
)
def test_a_bad_on_prem_template_is_one_line_naming_the_field(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(**change)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_cloud_templates_take_no_idle_power_and_powered_partitions_are_not_excluded() -> None:
    data = config()
    data["templates"][1]["min_on"] = 1
    with pytest.raises(ConfigError, match="min_on and idle_kw are for on-prem templates"):
        parse_settings(data, "test")
    with pytest.raises(ConfigError, match=r"is in slurm\.onprem_partitions"):
        parse_settings(config(onprem_partitions=["gpu"]), "test")


def test_slurm_conf_has_ordinary_on_prem_nodes_and_keeps_min_on_of_them_up() -> None:
    parsed = settings()
    lines = render_slurm_conf(parsed)
    [onprem_line] = [line for line in lines if line.startswith("NodeName=gpu-[01-04] CPUs")]
    assert "State=CLOUD" not in onprem_line
    assert any(line.startswith("NodeName=aws-[1-4]") and "State=CLOUD" in line for line in lines)
    assert "SuspendExcNodes=gpu-[01-04]:1" in lines
    assert "PartitionName=gpu Nodes=gpu-[01-04] State=UP" in lines
    assert not any(line.startswith("SuspendExcParts") for line in lines)
    assert "SuspendTimeout=180" in lines  # soft off 120 s + hard off 30 s + a 30 s cycle
    assert any(line.startswith("ResumeProgram=") for line in lines)
    cloud_flagged = {
        f"gpu-0{i}": WorkloadNode(
            f"gpu-0{i}",
            "IDLE",
            frozenset({"CLOUD"}),
            cpus=64,
            memory_mb=512000,
            partitions=("gpu",),
        )
        for i in range(1, 5)
    }
    problems = check_against_slurm(parsed, {}, cloud_flagged)
    assert any("an on-prem node is an ordinary node" in p for p in problems)


def node(name: str, state: str = "IDLE", *flags: str) -> WorkloadNode:
    return WorkloadNode(name, state, frozenset(flags))


def test_an_on_prem_node_loses_power_only_drained_or_powering_down_with_no_jobs() -> None:
    assert power_off_blocked(None) == "Slurm does not know the node"
    assert "jobs run on it" in (power_off_blocked(node("a", "ALLOCATED", "DRAIN")) or "")
    assert "jobs run on it" in (power_off_blocked(node("a", "IDLE", "DRAIN", "COMPLETING")) or "")
    assert "not drained" in (power_off_blocked(node("a", "IDLE")) or "")
    for flag in ("DRAIN", "POWER_DOWN", "POWERING_DOWN", "POWERED_DOWN"):
        assert power_off_blocked(node("a", "IDLE", flag)) is None


def record(name: str, state: NodeState, **kw: Any) -> NodeRecord:
    provider = "rack1" if name.startswith("gpu") else "aws1"
    template = "onprem-a100" if provider == "rack1" else "aws-a100"
    return NodeRecord(name, "cloud", state, template, provider, **kw)


def bmc(name: str, state: InstanceState) -> CloudInstance:
    return CloudInstance(
        instance_id=name,
        node_name=name,
        state=state,
        private_address=None,
        instance_type="dgx-a100",
        zone="hall-a",
        lifecycle="on-demand",
        launch_time=None,
    )


def snapshot(
    records: list[NodeRecord], power: dict[str, InstanceState], slurm: dict[str, WorkloadNode]
) -> Snapshot:
    listing = {name: bmc(name, state) for name, state in power.items()}
    return Snapshot(
        now=NOW,
        workload=WorkloadSnapshot(NOW, slurm),
        nodes={r.name: r for r in records},
        instances={"rack1": listing, "aws1": {}},
    )


def test_verdicts_boot_timeout_is_a_power_reason_and_bmc_nodes_are_never_orphans() -> None:
    parsed = settings()
    late = NOW - timedelta(seconds=700)
    records = [
        record("gpu-01", NodeState.BOOTING, instance_id="gpu-01", launched_at=late),
        record("gpu-02", NodeState.UP, instance_id="gpu-02", launched_at=late),
        record("gpu-03", NodeState.POWERED_DOWN),
        record("gpu-04", NodeState.POWERED_DOWN),
    ]
    power = {
        "gpu-01": InstanceState.RUNNING,
        "gpu-02": InstanceState.TERMINATED,
        "gpu-03": InstanceState.TERMINATED,
        "gpu-04": InstanceState.RUNNING,  # on, held by no row: kept on by an admin
    }
    slurm = {
        "gpu-01": node("gpu-01", "IDLE", "POWERING_UP"),
        "gpu-02": node("gpu-02", "IDLE"),
        "gpu-03": node("gpu-03", "IDLE", "POWERED_DOWN"),
        "gpu-04": node("gpu-04", "IDLE"),
    }
    judgment = reconcile(parsed, snapshot(records, power, slurm), orphan_grace_s=0)
    timed_out = judgment.verdicts["gpu-01"]
    assert timed_out.verdict is Verdict.BOOT_TIMEOUT
    assert timed_out.reason.startswith("(Code:POWER) not back within 600 s of its power on")
    vanished = judgment.verdicts["gpu-02"]
    assert vanished.verdict is Verdict.VANISHED and "its BMC reports it off" in vanished.reason
    assert judgment.orphans == {}


def test_a_node_whose_bmc_does_not_answer_is_not_capacity() -> None:
    parsed = settings()
    records = [
        record("gpu-01", NodeState.UP, instance_id="gpu-01", idle_since=NOW),
        record("gpu-02", NodeState.UP, instance_id="gpu-02", idle_since=NOW),
        record("gpu-03", NodeState.POWERED_DOWN),
        record("gpu-04", NodeState.POWERED_DOWN),
    ]
    power = {
        "gpu-01": InstanceState.RUNNING,
        "gpu-02": InstanceState.UNKNOWN,
        "gpu-03": InstanceState.TERMINATED,
        "gpu-04": InstanceState.UNKNOWN,
    }
    slurm = {
        "gpu-01": node("gpu-01"),
        "gpu-02": node("gpu-02"),
        "gpu-03": node("gpu-03", "IDLE", "POWERED_DOWN"),
        "gpu-04": node("gpu-04", "IDLE", "POWERED_DOWN"),
    }
    snap = snapshot(records, power, slurm)
    view = build_view(parsed, snap, reconcile(parsed, snap, orphan_grace_s=300))
    assert view.nodes["gpu-01"].idle and not view.nodes["gpu-02"].idle
    assert view.nodes["gpu-02"].power_unknown
    assert view.free_slots("onprem-a100") == ["gpu-03"]
    assert power_facts(parsed, snap.instances).unknown("gpu-04")
    # the provider could not be listed at all (every BMC rejected the credentials): all
    # its nodes' power is unknown, none is a slot to power on
    unlisted = replace(snap, instances={"aws1": {}})
    view = build_view(parsed, unlisted, reconcile(parsed, unlisted, orphan_grace_s=300))
    assert all(view.nodes[n].power_unknown for n in ("gpu-01", "gpu-03"))
    assert view.free_slots("onprem-a100") == [] and not view.nodes["gpu-01"].idle
    # Slurm has an on-prem node DOWN (a BMC fault an admin must fix): not a free slot
    down = dict(slurm, **{"gpu-03": node("gpu-03", "DOWN", "POWERED_DOWN")})
    snap = snapshot(records, power, down)
    view = build_view(parsed, snap, reconcile(parsed, snap, orphan_grace_s=300))
    assert view.free_slots("onprem-a100") == []


ONPREM = template(
    "rack",
    provider="rack1",
    provider_type="ipmi",
    partition="gpu",
    instance_types=("dgx-a100",),
    prices={},
    boot_timeout_s=600,
    min_on=1,
    idle_kw=2.0,
)
CLOUD = template("cloud", partition="gpu")


def onprem_node(name: str, state: NodeState, **kw: Any) -> NodeView:
    flags = frozenset() if state is NodeState.UP else frozenset({"POWERED_DOWN"})
    base = NodeView(
        name=name,
        kind="cloud",
        state=state,
        template="rack",
        slurm=WorkloadNode(name, "IDLE", flags),
    )
    return replace(base, **kw)


def cluster(nodes: list[NodeView], *templates: TemplateView, **kw: Any) -> ClusterView:
    return ClusterView(
        now=NOW,
        templates={t.name: t for t in templates},
        nodes={n.name: n for n in nodes},
        **kw,
    )


def test_idle_timeout_powers_idle_on_prem_nodes_off_but_keeps_min_on() -> None:
    long_ago = NOW - timedelta(hours=1)
    nodes = [
        onprem_node(f"r{i}", NodeState.UP, idle_since=long_ago, launched_at=long_ago)
        for i in range(1, 4)
    ]
    decision = run([PolicyRef(name="idle_timeout")], cluster(nodes, ONPREM))
    assert [s.node for s in decision.stops] == ["r1", "r2"]  # r3 stays on: min_on = 1
    unknown = [*nodes[:2], replace(nodes[2], power_unknown=True)]
    decision = run([PolicyRef(name="idle_timeout")], cluster(unknown, ONPREM))
    assert [s.node for s in decision.stops] == ["r1"]  # an unknown node is not idle capacity


def test_queue_depth_powers_on_prem_nodes_on_like_any_template() -> None:
    nodes = [onprem_node(f"r{i}", NodeState.POWERED_DOWN) for i in range(1, 4)]
    decision = run(
        [PolicyRef(name="queue_depth")],
        cluster(nodes, ONPREM, pending=(job("1", partition="gpu"),)),
    )
    [launch] = decision.launches
    assert (launch.template, launch.count) == ("rack", 1)


def test_onprem_first_powers_on_prem_nodes_on_before_a_cloud_launch() -> None:
    nodes = [
        onprem_node("r1", NodeState.POWERED_DOWN),
        onprem_node("r2", NodeState.POWERED_DOWN, power_unknown=True),
        onprem_node("r3", NodeState.BOOTING),
    ]
    pending = tuple(job(str(i), partition="gpu") for i in range(1, 5))
    chain = [PolicyRef(name="onprem_first", options={"minutes": 15}), PolicyRef(name="queue_depth")]
    decision = run(chain, cluster(nodes, ONPREM, CLOUD, pending=pending))
    by_template = {launch.template: launch.count for launch in decision.launches}
    # job 1 waits for the booting r3, job 2 powers r1 on, r2 (BMC silent) is no capacity:
    # jobs 3 and 4 burst to the cloud
    assert by_template == {"rack": 1, "cloud": 2}
    assert set(decision.held) == {"1", "2"}
    slow = replace(ONPREM, boot_timeout_s=1800)  # cannot boot within 15 minutes
    decision = run(chain, cluster(nodes, slow, CLOUD, pending=pending))
    assert decision.held == {}  # onprem_first leaves it to queue_depth's template order
    assert all(launch.reason.startswith("queue_depth") for launch in decision.launches)


def test_a_bmc_fault_sets_a_powered_down_node_down_never_one_slurm_has_up() -> None:
    parsed = settings()
    records = [record("gpu-01", NodeState.POWERED_DOWN)]
    fault = "(Code:AUTH) BmcPasswordRejected: password rejected (password from file /x)"
    faulty = replace(bmc("gpu-01", InstanceState.UNKNOWN), tags={TAG_FAULT: fault})

    def faults(seen: WorkloadNode) -> dict[str, str]:
        snap = snapshot(records, {}, {"gpu-01": seen})
        snap = replace(snap, instances={"rack1": {"gpu-01": faulty}, "aws1": {}})
        return reconcile(parsed, snap, orphan_grace_s=0).faults

    assert faults(node("gpu-01", "IDLE", "POWERED_DOWN", "DRAIN")) == {"gpu-01": fault}
    assert faults(node("gpu-01", "IDLE")) == {}  # up in Slurm: its jobs run, left alone
    assert faults(node("gpu-01", "DOWN", "POWERED_DOWN")) == {}  # DOWN already
    assert faults(node("gpu-01", "IDLE", "POWERED_DOWN", "POWER_UP")) == {}


def test_onprem_first_powers_nodes_on_up_to_min_on() -> None:
    chain = [PolicyRef(name="onprem_first")]
    two = replace(ONPREM, min_on=2)
    off = [onprem_node(f"r{i}", NodeState.POWERED_DOWN) for i in range(1, 4)]
    [launch] = run(chain, cluster(off, two)).launches
    assert (launch.template, launch.count) == ("rack", 2) and "min_on" in launch.reason
    # r1 on, r2's BMC silent (neither on nor a slot): one more, r3
    some = [
        onprem_node("r1", NodeState.UP),
        onprem_node("r2", NodeState.POWERED_DOWN, power_unknown=True),
        onprem_node("r3", NodeState.POWERED_DOWN),
    ]
    [launch] = run(chain, cluster(some, two)).launches
    assert launch.count == 1
    assert run(chain, cluster(some, ONPREM)).launches == ()  # min_on 1: r1 is enough
    slurm_mode = replace(two, demand_mode="slurm")
    assert run(chain, cluster(off, slurm_mode)).launches == ()


def test_onprem_first_changes_nothing_without_on_prem_templates() -> None:
    pending = (job("1", partition="gpu"),)
    chain = [PolicyRef(name="onprem_first"), PolicyRef(name="queue_depth")]
    slots = [replace(onprem_node("c1", NodeState.POWERED_DOWN), template="cloud")]
    decision = run(chain, cluster(slots, CLOUD, pending=pending))
    assert [(x.template, x.count) for x in decision.launches] == [("cloud", 1)]
    assert decision.held == {}


def test_the_energy_figure_counts_powered_off_on_prem_nodes_only() -> None:
    nodes = [
        onprem_node("r1", NodeState.POWERED_DOWN),
        onprem_node("r2", NodeState.POWERED_DOWN, power_unknown=True),
        onprem_node("r3", NodeState.UP),
        replace(onprem_node("c1", NodeState.POWERED_DOWN), template="cloud"),
    ]
    assert power_saved_kw(cluster(nodes, ONPREM, CLOUD)) == pytest.approx(2.0)
    figure = power_saved({"rack": 2.0}, {"rack": {"POWERED_DOWN": 3, "UP": 1}})
    assert figure == {
        "saved_kw": 6.0,
        "templates": {"rack": {"powered_off": 3, "idle_kw": 2.0, "saved_kw": 6.0}},
    }
    assert [power_of(s) for s in ("POWERED_DOWN", "BOOTING", "UP", "STOPPING", "RETIRED")] == [
        "off",
        "powering-on",
        "on",
        "powering-off",
        "-",
    ]


def test_an_on_prem_node_found_on_is_adopted_or_switched_off_when_slurm_has_it_off() -> None:
    parsed = settings()
    records = [record(f"gpu-0{i}", NodeState.POWERED_DOWN) for i in range(1, 5)]
    power = {
        "gpu-01": InstanceState.RUNNING,  # on and registered (held by the policy-mode hold)
        "gpu-02": InstanceState.RUNNING,  # on, but Slurm has it powered down: switched off
        "gpu-03": InstanceState.TERMINATED,
        "gpu-04": InstanceState.UNKNOWN,
    }
    hold = replace(node("gpu-01", "IDLE", "DRAIN"), reason="clustermgr: held")
    slurm = {
        "gpu-01": hold,
        "gpu-02": node("gpu-02", "IDLE", "POWERED_DOWN"),
        "gpu-03": node("gpu-03", "IDLE", "POWERED_DOWN"),
        "gpu-04": node("gpu-04", "IDLE"),
    }
    judgment = reconcile(parsed, snapshot(records, power, slurm), orphan_grace_s=0)
    adopted = judgment.verdicts["gpu-01"]
    assert adopted.verdict is Verdict.ADOPT and adopted.instance is not None
    assert adopted.instance.instance_id == "gpu-01"
    assert all(
        judgment.verdicts.get(n) is None or judgment.verdicts[n].verdict is not Verdict.ADOPT
        for n in ("gpu-02", "gpu-03", "gpu-04")
    )
    assert judgment.strays == {"rack1": ["gpu-02"]}
    # not while Slurm powers it up, places a job on it, or is still powering it down
    for flags in (("POWERED_DOWN", "POWER_UP"), ("POWERED_DOWN", "POWERING_DOWN")):
        slurm["gpu-02"] = node("gpu-02", "IDLE", *flags)
        assert reconcile(parsed, snapshot(records, power, slurm), orphan_grace_s=0).strays == {}
    slurm["gpu-02"] = node("gpu-02", "ALLOCATED", "POWERED_DOWN")
    assert reconcile(parsed, snapshot(records, power, slurm), orphan_grace_s=0).strays == {}

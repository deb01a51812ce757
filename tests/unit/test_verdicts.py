"""The verdict table: every combination has a verdict, every row is reachable and means
what it says, and the reconciler builds the axes from real snapshots the same way."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clustermgr.config import parse_settings
from clustermgr.db.ownership import Ownership
from clustermgr.nodes.states import NodeState
from clustermgr.providers.base import TAG_NODE, TAG_REQUEST, CloudInstance, InstanceState
from clustermgr.scaling.observe import NodeRecord, Snapshot
from clustermgr.scaling.reconcile import reconcile
from clustermgr.scaling.verdicts import (
    ANY,
    RULES,
    CloudSeen,
    Rule,
    SlurmSeen,
    Verdict,
    judge,
    slurm_seen,
    table_markdown,
)
from clustermgr.workload.base import WorkloadNode, WorkloadSnapshot

CONDITIONS = ("expired", "policy_mode", "stale_image")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def every_fact_set() -> list[frozenset[str]]:
    return [
        frozenset(c for c, on in zip(CONDITIONS, flags, strict=True) if on)
        for flags in itertools.product((False, True), repeat=len(CONDITIONS))
    ]


def example(rule: Rule) -> tuple[NodeState, CloudSeen, SlurmSeen, frozenset[str]]:
    """A combination this row decides (first match): proves no earlier row shadows it."""
    states = list(NodeState) if rule.states == ANY else sorted(rule.states)
    clouds = list(CloudSeen) if rule.cloud == ANY else sorted(rule.cloud)
    slurms = list(SlurmSeen) if rule.slurm == ANY else sorted(rule.slurm)
    for state, cloud, slurm in itertools.product(states, clouds, slurms):
        for facts in every_fact_set():
            if rule.when and rule.when not in facts:
                continue
            if judge(state, cloud, slurm, facts) is rule:
                return state, cloud, slurm, facts
    raise AssertionError(f"row {rule} is shadowed by the rows above it")


@pytest.mark.parametrize("rule", RULES, ids=[f"{i:02d}-{r.verdict}" for i, r in enumerate(RULES)])
def test_each_row_decides_some_combination(rule: Rule) -> None:
    state, cloud, slurm, facts = example(rule)
    assert judge(state, cloud, slurm, facts).verdict is rule.verdict


def test_every_combination_has_exactly_one_verdict() -> None:
    combos = itertools.product(NodeState, CloudSeen, SlurmSeen, every_fact_set())
    verdicts = {combo: judge(*combo).verdict for combo in combos}
    assert len(verdicts) == len(NodeState) * len(CloudSeen) * len(SlurmSeen) * 8
    assert set(verdicts.values()) <= set(Verdict)


def test_a_crashed_failure_path_is_finished_not_left_failed() -> None:
    # window 1: FAILED committed, instance still running, Slurm never told
    for slurm in SlurmSeen:
        assert judge(NodeState.FAILED, CloudSeen.ALIVE, slurm).verdict is Verdict.FINISH_FAIL
    assert judge(NodeState.FAILED, CloudSeen.UNLISTED, SlurmSeen.DOWN).verdict is Verdict.KEEP


def test_a_bound_node_slurm_never_heard_of_is_told_again() -> None:
    # window 2: BOOTING with a running instance, Slurm has no address / still holds it
    booting = NodeState.BOOTING
    assert judge(booting, CloudSeen.ALIVE, SlurmSeen.UNTOLD).verdict is Verdict.TELL_SLURM
    held = judge(booting, CloudSeen.ALIVE, SlurmSeen.POWERED_DOWN, frozenset({"policy_mode"}))
    assert held.verdict is Verdict.TELL_SLURM
    gave_up = judge(booting, CloudSeen.ALIVE, SlurmSeen.POWERED_DOWN)
    assert gave_up.verdict is Verdict.STOP
    late = judge(booting, CloudSeen.ALIVE, SlurmSeen.UNTOLD, frozenset({"expired"}))
    assert late.verdict is Verdict.BOOT_TIMEOUT


def test_a_node_slurm_still_holds_for_its_launch_is_released_once_bound() -> None:
    # killed after the addresses were told, before the launch's hold was released
    booting, policy = NodeState.BOOTING, frozenset({"policy_mode"})
    for facts in (frozenset(), policy):
        held = judge(booting, CloudSeen.ALIVE, SlurmSeen.HELD, facts)
        assert held.verdict is Verdict.TELL_SLURM, facts
    late = judge(booting, CloudSeen.ALIVE, SlurmSeen.HELD, frozenset({"expired"}))
    assert late.verdict is Verdict.BOOT_TIMEOUT
    # launching: adopted or relaunched, and both release the hold once bound
    launching = NodeState.LAUNCHING
    assert judge(launching, CloudSeen.WAITING, SlurmSeen.HELD).verdict is Verdict.ADOPT
    assert judge(launching, CloudSeen.NONE, SlurmSeen.HELD).verdict is Verdict.RELAUNCH
    # powered up for a launch that failed, and Slurm never heard: in policy mode Slurm is
    # told now (the policies launch again if the jobs still need it), in slurm mode its
    # resume is the demand
    told = judge(NodeState.POWERED_DOWN, CloudSeen.NONE, SlurmSeen.HELD, policy)
    assert told.verdict is Verdict.POWER_DOWN
    resumed = judge(NodeState.POWERED_DOWN, CloudSeen.NONE, SlurmSeen.HELD)
    assert resumed.verdict is Verdict.RESUME
    # an up node is never released by the table: it was not held for a launch
    assert judge(NodeState.UP, CloudSeen.ALIVE, SlurmSeen.HELD).verdict is Verdict.KEEP


def test_slurm_axis_from_sinfo_nodes() -> None:
    def node(state: str, *flags: str, address: str = "n1", reason: str = "") -> WorkloadNode:
        return WorkloadNode(
            "n1", state, frozenset({"CLOUD", *flags}), address=address, reason=reason
        )

    assert slurm_seen(None, None) is SlurmSeen.MISSING
    assert slurm_seen(node("IDLE", "POWERED_DOWN"), None) is SlurmSeen.POWERED_DOWN
    assert slurm_seen(node("IDLE", "POWERED_DOWN"), "10.0.0.5") is SlurmSeen.UNTOLD
    up = node("IDLE", "POWERING_UP", address="10.0.0.5")
    assert slurm_seen(up, "10.0.0.5") is SlurmSeen.WOKEN  # no job on it
    for_a_job = node("MIXED", "POWERING_UP", address="10.0.0.5")
    assert slurm_seen(for_a_job, "10.0.0.5") is SlurmSeen.POWERING_UP
    assert slurm_seen(node("ALLOCATED", "POWERED_DOWN"), None) is SlurmSeen.POWERING_UP
    assert slurm_seen(node("MIXED", address="10.0.0.5"), "10.0.0.5") is SlurmSeen.REGISTERED
    assert slurm_seen(node("IDLE"), "10.0.0.5") is SlurmSeen.UNTOLD  # registered, unreachable
    assert slurm_seen(node("IDLE", "POWERING_DOWN"), None) is SlurmSeen.POWERING_DOWN
    sick = "(Code:HEALTH) boot: 1 of 2 GPUs visible"
    assert slurm_seen(node("IDLE", "POWERING_DOWN", reason=sick), None) is SlurmSeen.SICK_OUT
    assert slurm_seen(node("MIXED", "DRAIN", reason=sick), None) is SlurmSeen.SICK_BUSY
    assert slurm_seen(node("IDLE", "DRAIN", reason=sick), None) is SlurmSeen.SICK_IDLE
    assert slurm_seen(node("DOWN", "NOT_RESPONDING"), None) is SlurmSeen.DOWN


def test_slurm_axis_tells_the_launch_hold_from_an_admin_drain() -> None:
    def node(*flags: str, reason: str = "", state: str = "IDLE") -> WorkloadNode:
        return WorkloadNode(
            "n1", state, frozenset({"CLOUD", *flags}), address="10.0.0.5", reason=reason
        )

    hold = "clustermgr: held until a policy launches it"
    powering = ("DRAIN", "NOT_RESPONDING", "POWERING_UP")
    # slurmctld clears a drained node's reason when it starts powering it up
    assert slurm_seen(node(*powering), "10.0.0.5") is SlurmSeen.HELD
    assert slurm_seen(node(*powering, reason=hold), "10.0.0.5") is SlurmSeen.HELD
    assert slurm_seen(node("DRAIN"), "10.0.0.5") is SlurmSeen.HELD  # registered while held
    assert slurm_seen(node(*powering), "10.0.0.9") is SlurmSeen.UNTOLD  # address first
    # a held slot that is still powered down is just that
    down = node("DRAIN", "POWERED_DOWN", reason=hold)
    assert slurm_seen(down, None) is SlurmSeen.POWERED_DOWN
    assert slurm_seen(node("DRAIN", "POWER_UP", "POWERED_DOWN", reason=hold), None) == (
        SlurmSeen.POWERED_DOWN
    )
    # an admin's drain (or a failure's reason) is not ours: the node is judged as before
    admin = "disk replacement, ticket 4411"
    assert slurm_seen(node(*powering, reason=admin), "10.0.0.5") is SlurmSeen.WOKEN
    assert slurm_seen(node("DRAIN", reason=admin), "10.0.0.5") is SlurmSeen.REGISTERED
    quota = node("DRAIN", "POWER_DOWN", "NOT_RESPONDING", reason="(Code:QUOTA) VcpuLimit")
    assert slurm_seen(quota, None) is SlurmSeen.DOWN


def test_the_architecture_doc_prints_the_table_of_the_code() -> None:
    assert table_markdown() in DOCS.read_text()


# --- the reconciler builds the axes from a snapshot --------------------------------------

SETTINGS = parse_settings(
    {
        "cluster": {"name": "t"},
        "providers": [{"name": "aws1", "type": "aws", "region": "us-east-1"}],
        "templates": [
            {
                "name": "gpu",
                "provider": "aws1",
                "partition": "gpu",
                "nodes": "g[1-4]",
                "instance_types": ["p4d.24xlarge"],
                "image": "ami-1",
                "cpus": 8,
                "memory_mb": 64000,
                "gpu_model": "a100",
                "gpus": 8,
                "boot_timeout_s": 600,
            }
        ],
    }
)


def record(name: str, state: NodeState, **kw: object) -> NodeRecord:
    base: dict[str, object] = {
        "name": name,
        "kind": "cloud",
        "state": state,
        "template": "gpu",
        "provider": "aws1",
        "launched_at": NOW - timedelta(seconds=30),
        "state_since": NOW - timedelta(seconds=30),
    }
    return NodeRecord(**{**base, **kw})  # type: ignore[arg-type]


def instance(iid: str, node: str, request: str, address: str = "10.0.0.9") -> CloudInstance:
    return CloudInstance(
        iid,
        node,
        InstanceState.RUNNING,
        address,
        "p4d.24xlarge",
        None,
        "on-demand",
        NOW - timedelta(seconds=40),
        {TAG_REQUEST: request, TAG_NODE: node},
    )


def snapshot(
    records: list[NodeRecord], instances: list[CloudInstance], slurm: list[WorkloadNode]
) -> Snapshot:
    return Snapshot(
        now=NOW,
        workload=WorkloadSnapshot(NOW, {n.name: n for n in slurm}),
        nodes={r.name: r for r in records},
        instances={"aws1": {i.instance_id: i for i in instances}},
    )


def test_crash_states_are_judged_into_finishing_verdicts() -> None:
    failed = record("g1", NodeState.FAILED, instance_id="i-1", state_reason="(Code:QUOTA) x")
    booting = record("g2", NodeState.BOOTING, instance_id="i-2", private_address="10.0.0.9")
    slurm = [
        WorkloadNode("g1", "IDLE", frozenset({"CLOUD", "POWERING_UP"}), address="10.0.0.8"),
        WorkloadNode("g2", "IDLE", frozenset({"CLOUD", "POWERED_DOWN", "DRAIN"}), address="g2"),
    ]
    found = reconcile(
        SETTINGS,
        snapshot(
            [failed, booting],
            [instance("i-1", "g1", "r1", "10.0.0.8"), instance("i-2", "g2", "r2")],
            slurm,
        ),
        orphan_grace_s=0,
    )
    assert found.verdicts["g1"].verdict is Verdict.FINISH_FAIL
    assert found.verdicts["g1"].reason == "(Code:QUOTA) x"
    assert found.verdicts["g2"].verdict is Verdict.TELL_SLURM
    assert found.orphans == {}  # the FAILED node still holds i-1: finishing it terminates it


def test_a_bound_node_held_for_its_launch_is_told_but_an_admin_drain_is_not() -> None:
    told = dict(instance_id="i-1", private_address="10.0.0.9", request_id="r1")
    held = record("g1", NodeState.BOOTING, **told)
    admin = record("g2", NodeState.BOOTING, **{**told, "instance_id": "i-2"})
    powering = frozenset({"CLOUD", "DRAIN", "NOT_RESPONDING", "POWERING_UP"})
    slurm = [
        WorkloadNode("g1", "IDLE", powering, address="10.0.0.9"),  # reason cleared by Slurm
        WorkloadNode("g2", "IDLE", powering, address="10.0.0.9", reason="bad DIMM"),
    ]
    instances = [instance("i-1", "g1", "r1"), instance("i-2", "g2", "r1")]
    found = reconcile(SETTINGS, snapshot([held, admin], instances, slurm), orphan_grace_s=0)
    assert found.verdicts["g1"].verdict is Verdict.TELL_SLURM
    assert (found.verdicts["g1"].slurm, found.verdicts["g2"].slurm) == (
        SlurmSeen.HELD,
        SlurmSeen.WOKEN,
    )
    assert found.verdicts["g2"].verdict is Verdict.WAIT_BOOT


def test_a_request_with_a_missing_instance_is_relaunched_whole() -> None:
    a = record("g1", NodeState.LAUNCHING, request_id="r1")
    b = record("g2", NodeState.LAUNCHING, request_id="r1")
    found = reconcile(SETTINGS, snapshot([a, b], [instance("i-1", "g1", "r1")], []), 0)
    assert found.relaunch == {"r1": ["g1", "g2"]}
    assert {j.verdict for j in found.verdicts.values()} == {Verdict.RELAUNCH}
    assert found.orphans == {}  # i-1 belongs to the request being re-issued
    both = reconcile(
        SETTINGS,
        snapshot([a, b], [instance("i-1", "g1", "r1"), instance("i-2", "g2", "r1")], []),
        0,
    )
    assert {j.verdict for j in both.verdicts.values()} == {Verdict.ADOPT}


def test_hook_requests_override_the_table_but_not_a_failure() -> None:
    from clustermgr.workload.hooks import HookRequest

    up = record("g1", NodeState.UP, instance_id="i-1", private_address="10.0.0.9")
    gone = record("g2", NodeState.UP, instance_id="i-gone", private_address="10.0.0.7")
    slurm = [
        WorkloadNode("g1", "IDLE", frozenset({"CLOUD"}), address="10.0.0.9"),
        WorkloadNode("g2", "IDLE", frozenset({"CLOUD"}), address="10.0.0.7"),
    ]
    base = snapshot([up, gone], [instance("i-1", "g1", "r1")], slurm)
    suspend = HookRequest("suspend", ("g1", "g2"), {}, 0.0)
    found = reconcile(SETTINGS, Snapshot(**{**base.__dict__, "requests": (suspend,)}), 0)
    assert found.verdicts["g1"].verdict is Verdict.STOP
    assert found.verdicts["g2"].verdict is Verdict.VANISHED
    assert found.verdicts["g2"].reason.startswith("(Code:VANISHED) instance i-gone is gone")


def test_unbound_instances_of_an_issued_request_past_the_grace_period_are_orphans() -> None:
    idle = record("g1", NodeState.POWERED_DOWN)
    base = snapshot([idle], [instance("i-9", "g1", "old")], [])
    ours = replace(base, ownership=Ownership(issued=frozenset({"old"})))
    found = reconcile(SETTINGS, ours, 30)
    assert found.orphans == {"aws1": ["i-9"]} and found.foreign == {}
    young = reconcile(SETTINGS, ours, 60)
    assert young.orphans == {} and young.foreign == {}


def test_an_instance_a_retired_slot_still_holds_is_no_orphan() -> None:
    retired = record("g1", NodeState.RETIRED, instance_id="i-1")
    found = reconcile(SETTINGS, snapshot([retired], [instance("i-1", "g1", "r1")], []), 0)
    assert found.orphans == {}
    assert found.verdicts["g1"].verdict is Verdict.KEEP


def test_a_policy_mode_slot_slurm_powers_up_with_no_job_is_powered_down_not_launched() -> None:
    """Found by the crash campaign: Slurm 22.05 keeps a power-up request it has not acted on
    through a later POWER_DOWN_FORCE (a node stopped right after its wake) and powers the
    node up once it is down; launching for that started instances no job wanted."""
    policy = frozenset({"policy_mode"})
    down = NodeState.POWERED_DOWN
    for slurm in (SlurmSeen.WOKEN, SlurmSeen.HELD):
        assert judge(down, CloudSeen.NONE, slurm, policy).verdict is Verdict.POWER_DOWN
        assert judge(down, CloudSeen.NONE, slurm).verdict is Verdict.RESUME  # slurm mode
    # a job Slurm placed on a slot not yet held is launched for, in either mode
    for facts in (frozenset(), policy):
        placed = judge(down, CloudSeen.NONE, SlurmSeen.POWERING_UP, facts)
        assert placed.verdict is Verdict.RESUME
    # a launched node woken by cm-scale itself is simply booting
    booting = judge(NodeState.BOOTING, CloudSeen.ALIVE, SlurmSeen.WOKEN, policy)
    assert booting.verdict is Verdict.WAIT_BOOT

"""Every pending job of a cloud partition is accounted for in the plan, with a reason a
person can act on; odd jobs are never silently absent."""

from __future__ import annotations

from dataclasses import replace

from clustermgr.policy.decision import Refusal, ScaleDecision
from clustermgr.scaling.accounting import account_jobs
from clustermgr.scaling.act import to_hold
from clustermgr.scaling.clamp import LaunchOrder, Plan
from clustermgr.workload.base import WorkloadNode
from tests.unit.test_policies import job, slot, template, view


def fates(plan: Plan, decision: ScaleDecision, *jobs: object) -> dict[str, tuple[str, str]]:
    v = view([], list(jobs), templates={"gpu": template(gpus=2, memory_mb=2000, max_nodes=6)})
    return {j: (f.status, f.reason) for f in account_jobs(v, decision, plan) for j in f.jobs}


def test_odd_jobs_are_reported_unfit_whatever_slurm_says_of_them() -> None:
    found = fates(
        Plan(),
        ScaleDecision(),
        job("1", gpus_per_node=3, reason="ReqNodeNotAvail"),
        job("2", nodes=20, gpus_per_node=1, reason="PartitionNodeLimit"),
        job("3", memory_per_node_mb=5000, gpus_per_node=1),
        job("4", partition="onprem"),
    )
    assert found["1"] == ("unfit", "needs 3 GPUs per node, gpu has 2")
    assert found["2"] == ("unfit", "needs 20 nodes, gpu allows at most 6")
    assert found["3"] == ("unfit", "needs 5000 MB per node, gpu has 2000 MB")
    # not a cloud partition: Slurm's own business, but the dry run still shows it
    assert found["4"] == ("other", "no template serves partition onprem: Slurm's own nodes")


def test_launched_refused_held_and_waiting_jobs() -> None:
    plan = Plan(
        launches=[LaunchOrder("gpu", ("g1",), "on-demand", "r-1", "queue_depth", ("1",))],
        refusals=[Refusal("gpu", "budget_cap: $10/h reached", ("2",))],
    )
    decision = ScaleDecision(held={"3": "onprem_first: on-prem frees up first"})
    found = fates(
        plan,
        decision,
        job("1", gpus_per_node=1),
        job("2", gpus_per_node=1),
        job("3", gpus_per_node=1),
        *[job(str(i), gpus_per_node=1, reason="JobHeldUser") for i in range(10, 17)],
        job("20", gpus_per_node=1, reason="Dependency"),
        job("21", gpus_per_node=1),
    )
    assert found["1"] == ("served", "waiting for gpu nodes g1, launched for it")
    assert found["2"] == ("refused", "budget_cap: $10/h reached")
    assert found["3"] == ("held", "onprem_first: on-prem frees up first")
    assert {found[str(i)] for i in range(10, 17)} == {("held", "Slurm: JobHeldUser")}
    assert found["20"] == ("waiting", "Slurm: Dependency")
    assert found["21"][0] == "waiting"


def test_a_refusal_without_job_ids_covers_its_template() -> None:
    plan = Plan(refusals=[Refusal("gpu", "office_hours: no bursting before 7:00")])
    found = fates(plan, ScaleDecision(), job("1", gpus_per_node=1))
    assert found["1"] == ("refused", "office_hours: no bursting before 7:00")


def test_a_policy_mode_hold_keeps_the_last_failure_visible() -> None:
    from clustermgr.scaling.act import HOLD_REASON_MAX, hold_reason

    assert hold_reason("") == "clustermgr: held until a policy launches it"
    assert hold_reason("idle_timeout: idle 12 min") == hold_reason("")  # not a failure
    quota = "(Code:QUOTA) VcpuLimitExceeded: you have requested more vCPU capacity"
    assert hold_reason(quota) == f"clustermgr: held until a policy launches it; last: {quota}"
    assert len(hold_reason("(Code:CAPACITY) " + "x" * 500)) == HOLD_REASON_MAX


def test_a_launch_holds_first_the_policy_mode_slots_slurm_does_not_hold() -> None:
    def slurm(name: str, *flags: str, reason: str = "") -> WorkloadNode:
        return WorkloadNode(
            name, "IDLE", frozenset({"CLOUD", "POWERED_DOWN", *flags}), reason=reason
        )

    hold = "clustermgr: held until a policy launches it"
    nodes = [
        slot("g1", slurm=slurm("g1", "DRAIN", reason=hold)),  # held: powered up as it is
        slot("g2", slurm=slurm("g2")),  # freed since the last cycle's hold: held first
        slot("g3", slurm=slurm("g3", "DRAIN", reason="bad PSU")),  # an admin's drain: left
        slot("s1", template="batch", slurm=slurm("s1")),  # slurm mode: never held
    ]
    templates = {"gpu": template(), "batch": template("batch", demand_mode="slurm")}
    v = view(nodes, [], templates=templates)
    assert to_hold(v, ["g1", "g2", "g3", "s1"]) == ["g2"]
    assert [n.name for n in nodes if n.slurm and n.slurm.held] == ["g1"]
    # powering up, the hold's reason is gone (slurmctld clears it): still ours
    powering = replace(nodes[0], slurm=WorkloadNode("g1", "IDLE", frozenset({"DRAIN"})))
    assert powering.slurm is not None and powering.slurm.held


def test_a_node_whose_power_up_slurm_has_not_acted_on_is_not_asked_again() -> None:
    """Found by the crash campaign: a restarted cycle told Slurm the addresses of nodes
    whose power-up request (`POWER_UP`) Slurm had not acted on yet, and asked again; Slurm
    kept that second request through the scale-down's power-down, powered the nodes up
    again a moment later, and cm-scale launched instances with no job waiting for them."""
    from clustermgr.scaling.act import _powered_down, to_power_up
    from clustermgr.scaling.observe import Snapshot
    from clustermgr.workload.base import WorkloadSnapshot
    from tests.unit.test_verdicts import NOW

    hold = "clustermgr: held until a policy launches it"
    seen = {
        "g1": WorkloadNode(
            "g1", "IDLE", frozenset({"CLOUD", "POWERED_DOWN", "POWER_UP", "DRAIN"}), reason=hold
        ),
        "g2": WorkloadNode(
            "g2", "IDLE", frozenset({"CLOUD", "POWERED_DOWN", "DRAIN"}), reason=hold
        ),
        "g3": WorkloadNode("g3", "IDLE", frozenset({"CLOUD", "POWERING_UP", "NOT_RESPONDING"})),
    }
    v = view([slot(name, slurm=node) for name, node in seen.items()], [])
    assert to_power_up(v, sorted(seen)) == ["g2"]
    snapshot = Snapshot(now=NOW, workload=WorkloadSnapshot(NOW, seen), nodes={}, instances={})
    assert [n for n in sorted(seen) if _powered_down(snapshot, n)] == ["g2"]


def test_json_rows_list_every_job_id_the_table_shortens() -> None:
    from clustermgr.cli.plan_output import SHOWN_JOBS, plan_rows

    held = [job(str(i), gpus_per_node=1, reason="JobHeldUser") for i in range(10, 22)]
    v = view([], held, templates={"gpu": template(gpus=2, memory_mb=2000, max_nodes=6)})
    plan = replace(Plan(), jobs=account_jobs(v, ScaleDecision(), Plan()))
    (row,) = [r for r in plan_rows(plan) if r["action"] == "held"]
    assert row["jobs"] == [str(i) for i in range(10, 22)] and row["count"] == 12
    assert row["target"].endswith(f"(+{12 - SHOWN_JOBS} more)")


def test_clamp_gives_each_launch_alternates_cut_to_every_limit() -> None:
    """Capacity fallbacks are decided by clamp, not act: the fallback template's free slots
    within its max_nodes and, on another provider, that provider's max_instances; the budget
    sees the dearest alternate (`launch_price`). The dry run shows all of it."""
    from clustermgr.cli.plan_output import plan_rows
    from clustermgr.config import parse_settings
    from clustermgr.core.pricing import Price
    from clustermgr.policy.decision import Launch
    from clustermgr.scaling.clamp import clamp

    spare_price = {"g5.12xlarge": Price(50.0, 20.0)}
    templates = {
        "gpu": template(fallbacks=("spare",), instance_types=("p4d.24xlarge",)),
        "spare": template(
            "spare", provider="aws2", instance_types=("g5.12xlarge",), prices=spare_price
        ),
    }
    slots = [slot(f"g{i}") for i in (1, 2, 3)]
    slots += [slot(f"s{i}", template="spare") for i in (1, 2, 3)]
    v = view(slots, [], templates=templates)
    assert v.launch_price("gpu") == 50.0 and v.launch_price("spare") == 50.0
    providers = [
        {"name": "aws1", "type": "aws", "region": "us-east-1"},
        {"name": "aws2", "type": "aws", "region": "us-east-1", "max_instances": 1},
    ]
    decision = ScaleDecision(launches=(Launch("gpu", 3, "queue_depth", jobs=("7",)),))
    [order] = clamp(decision, v, parse_settings({"providers": providers})).launches
    assert order.nodes == ("g1", "g2", "g3")
    [alternate] = order.alternates
    assert (alternate.template, alternate.nodes, alternate.jobs) == ("spare", ("s1",), ("7",))
    assert order.cut == (
        "fallback covers 1 of 3 nodes (spare: 1 of 3 nodes (max_instances of provider aws2))"
    )
    [row] = plan_rows(clamp(decision, v, parse_settings({"providers": providers})))
    assert "; no capacity: spare [s1]; fallback covers 1 of 3 nodes" in row["reason"]
    blocked = dict(templates, spare=replace(templates["spare"], protected="(Code:PROTECTED) x"))
    v = view(slots, [], templates=blocked)
    [order] = clamp(decision, v, parse_settings({"providers": providers})).launches
    assert order.alternates == () and "spare: (Code:PROTECTED) x" in order.cut
    assert v.launch_price("gpu") == 30.0  # a protected fallback launches nothing


def test_clamp_notes_name_the_limit_that_cut_a_launch() -> None:
    """An admin reads which limit cut a launch: free slots, the template's max_nodes, or the
    provider's max_instances (issue 26: 'only 6 of 51 ... have a powered-down slot' was
    printed while 8 slots were free and max_nodes cut it)."""
    from clustermgr.config import parse_settings
    from clustermgr.policy.decision import Launch
    from clustermgr.scaling.clamp import clamp

    slots = [slot(f"g{i}") for i in range(1, 9)]
    v = view(slots, [], templates={"gpu": template(max_nodes=6)})
    settings = parse_settings({"providers": [{"name": "aws1", "type": "aws", "region": "r"}]})
    plan = clamp(ScaleDecision(launches=(Launch("gpu", 51, "queue_depth"),)), v, settings)
    assert plan.notes == [
        "clamp: gpu: only 8 of 51 wanted nodes have a powered-down slot",
        "clamp: gpu: 2 of 8 launches cut by max_nodes = 6 (0 active or planned)",
    ]
    assert len(plan.launches[0].nodes) == 6
    capped = parse_settings(
        {"providers": [{"name": "aws1", "type": "aws", "region": "r", "max_instances": 3}]}
    )
    plan = clamp(ScaleDecision(launches=(Launch("gpu", 5, "queue_depth"),)), v, capped)
    assert plan.notes == [
        "clamp: gpu: 2 of 5 launches cut by provider aws1's max_instances = 3 (0 active or planned)"
    ]


def test_a_protection_hold_keeps_the_failure_that_led_to_it_in_slurm() -> None:
    """A launch refused as INVALID protects the template; the node's hold then names the
    protection and, after it, the cloud's own words (issue 26: the `(Code:INVALID) ...` was
    rewritten to a plain hold two minutes later)."""
    from clustermgr.scaling.act import HOLD_REASON_MAX, wanted_hold

    invalid = "(Code:INVALID) g3.8xlarge is not offered in us-east-1"
    protected = "(Code:PROTECTED) the cloud refused its launch as INVALID"
    flags = frozenset({"CLOUD", "DRAIN", "POWERED_DOWN"})
    failed = WorkloadNode("g1", "IDLE", frozenset({"CLOUD", "POWERED_DOWN"}), reason=invalid)
    wanted = wanted_hold(failed, protected)
    assert wanted == f"clustermgr: {protected}; last: {invalid}"
    plain = f"clustermgr: held until a policy launches it; last: {invalid}"  # held before
    assert wanted_hold(WorkloadNode("g1", "IDLE", flags, reason=plain), protected) == wanted
    held = WorkloadNode("g1", "IDLE", flags, reason=wanted)
    assert wanted_hold(held, protected) is None  # kept as it is, cycle after cycle
    long = WorkloadNode("g1", "IDLE", failed.flags, reason=invalid + " x" * 200)
    cut = wanted_hold(long, protected)
    assert cut is not None and len(cut) == HOLD_REASON_MAX
    assert wanted_hold(WorkloadNode("g1", "IDLE", flags, reason=cut), protected) is None


def test_jobs_of_one_shape_share_a_shape_key_and_other_shapes_do_not() -> None:
    """The hot loops of queue_depth and the accounting key their memos by `shape_key`: jobs
    asking for the same thing share one (so their fit is decided once), jobs differing in
    anything the fit reads do not (or one would be judged by the other's fit)."""
    from clustermgr.policy import job_shape, shape_key

    one, same, wider = job("1"), job("2", reason="Priority"), job("3", nodes=2)
    assert shape_key(one) == shape_key(same) != shape_key(wider)
    assert job_shape(one) == job_shape(same) and one.shape_key == shape_key(one)
    assert shape_key(job("4", features=("a100",))) not in (shape_key(one), shape_key(wider))

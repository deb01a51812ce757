"""Every pending job of a cloud partition is accounted for in the plan, with a reason a
person can act on; odd jobs are never silently absent."""

from __future__ import annotations

from clustermgr.policy.decision import Refusal, ScaleDecision
from clustermgr.scaling.accounting import account_jobs
from clustermgr.scaling.clamp import LaunchOrder, Plan
from tests.unit.test_policies import job, template, view


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
    assert "4" not in found  # not a cloud partition: not the plan's business


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
    assert found["1"] == ("launch", "nodes of gpu launched for it")
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

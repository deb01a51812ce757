"""What users see of cm-scale's verdict in Slurm (issue 26 item 5): the comment each pending
job should carry, written only when it changes, never over the user's own; and every pending
job and array's task count in the dry run (item 7)."""

from __future__ import annotations

import pytest

from clustermgr.cli.plan_output import plan_rows
from clustermgr.config import PolicyRef
from clustermgr.policy.decision import Refusal, ScaleDecision
from clustermgr.scaling.accounting import account_jobs, as_launched
from clustermgr.scaling.clamp import LaunchOrder, Plan
from clustermgr.scaling.comments import MAX_JOBS_PER_CYCLE, comment_updates
from clustermgr.workload.base import COMMENT_MAX, comment_text
from clustermgr.workload.squeue import PENDING_FIELDS, parse_pending
from tests.unit.test_policies import job, run, slot, template, view

pytestmark = pytest.mark.unit
PROTECTED = (
    "(Code:PROTECTED) 3 launch/boot failures in a row (last INVALID); launches refused "
    "until 14:05 UTC or `clustermgr templates reset gpu`"
)


def planned(jobs: list[object], plan: Plan, decision: ScaleDecision | None = None) -> Plan:
    v = view([], jobs, templates={"gpu": template(gpus=2, memory_mb=2000, max_nodes=6)})
    plan.jobs = account_jobs(v, decision or ScaleDecision(), plan)
    return plan


def updates(jobs: list[object], plan: Plan, **templates: object) -> dict[str, list[str]]:
    v = view([], jobs, templates={"gpu": template(gpus=2, memory_mb=2000, max_nodes=6)})
    if templates:
        v = view([], jobs, templates=templates)
    plan.jobs = account_jobs(v, ScaleDecision(), plan)
    return comment_updates(v, plan.jobs)


def test_each_verdict_reads_as_cm_scale_s_own() -> None:
    plan = Plan(launches=[LaunchOrder("gpu", ("g1", "g2"), "on-demand", "r-1", "qd", ("1",))])
    jobs = [
        job("1", gpus_per_node=1),
        job("2", gpus_per_node=3, reason="Priority"),
        job("3", gpus_per_node=1, reason="JobHeldUser"),
        job("4", gpus_per_node=1, reason="Dependency"),
        job("5", partition="onprem"),
    ]
    found = updates(jobs, plan)
    by_job = {j: text for text, ids in found.items() for j in ids}
    assert by_job == {
        "1": "clustermgr: waiting for gpu nodes g[1-2], launched for it",
        "2": "clustermgr: unfit: needs 3 GPUs per node, gpu has 2",
    }  # Slurm's own hold, dependency and on-prem partition: Slurm's reason says it


def test_a_job_whose_launch_failed_is_not_told_it_was_launched_for() -> None:
    """The comment is written after the launches: one that started none of the job's nodes
    gives the failure, one that started some names those."""
    capacity = "(Code:CAPACITY) AllOrNothing: all-or-nothing: got 0 of 2"
    plan = Plan(
        launches=[
            LaunchOrder("gpu", ("g1", "g2"), "on-demand", "r-1", "qd", ("1",)),
            LaunchOrder("gpu", ("g3", "g4"), "on-demand", "r-2", "qd", ("2",)),
            LaunchOrder("gpu", ("g5", "g6"), "on-demand", "r-3", "qd", ("3",)),
        ]
    )
    jobs = [job(str(i), gpus_per_node=1) for i in (1, 2, 3)]
    v = view([], jobs, templates={"gpu": template(gpus=2, memory_mb=2000, max_nodes=6)})
    plan.jobs = account_jobs(v, ScaleDecision(), plan)
    failed = {"g3": capacity, "g4": capacity, "g6": "(Code:CAPACITY) short"}
    found = comment_updates(v, as_launched(plan, {"g1", "g2", "g5"}, failed))
    by_job = {j: text for text, ids in found.items() for j in ids}
    assert by_job == {
        "1": "clustermgr: waiting for gpu nodes g[1-2], launched for it",
        "2": f"clustermgr: waiting: launch failed, decided again next cycle: {capacity}",
        "3": "clustermgr: waiting for nodes g5, launched for it (1 of 2 failed: "
        "(Code:CAPACITY) short)",
    }


def test_a_protected_template_s_jobs_carry_its_code_and_retry_time() -> None:
    plan = Plan(refusals=[Refusal("gpu", PROTECTED)])
    (text,) = updates([job("7", gpus_per_node=1)], plan)
    assert text == f"clustermgr: {PROTECTED}"
    assert "until 14:05 UTC" in text


def test_a_job_is_written_only_when_its_verdict_changes() -> None:
    plan = Plan(refusals=[Refusal("gpu", "budget_cap: $10/h reached")])
    said = "clustermgr: refused: budget_cap: $10/h reached"
    assert updates([job("1", gpus_per_node=1, comment=said)], plan) == {}
    assert updates([job("1", gpus_per_node=1, comment="clustermgr: old")], plan) == {said: ["1"]}


def test_the_user_s_own_comment_is_never_replaced_and_ours_is_cleared_when_stale() -> None:
    jobs = [
        job("1", gpus_per_node=1, reason="JobHeldUser", comment="my run, do not touch"),
        job("2", gpus_per_node=9, comment="calibration"),
        job("3", gpus_per_node=1, reason="Dependency", comment="clustermgr: unfit: old"),
        job("4", partition="onprem", comment="clustermgr: unfit: old"),
    ]
    assert updates(jobs, Plan()) == {"": ["3", "4"]}


def test_slurm_mode_templates_jobs_are_left_to_slurm() -> None:
    slurm_mode = template(gpus=2, demand_mode="slurm")
    assert updates([job("1", gpus_per_node=3)], Plan(), gpu=slurm_mode) == {}


def test_a_long_queue_is_written_a_capped_number_of_jobs_a_cycle() -> None:
    jobs = [job(str(n), gpus_per_node=3) for n in range(MAX_JOBS_PER_CYCLE + 500)]
    (ids,) = updates(jobs, Plan()).values()
    assert len(ids) == MAX_JOBS_PER_CYCLE


def test_comment_text_is_one_capped_line() -> None:
    assert comment_text("clustermgr: a\nb\tc\x00d  e") == "clustermgr: a b c d e"
    assert len(comment_text("clustermgr: " + "x" * 1000)) == COMMENT_MAX


def test_squeue_s_comment_is_read_even_with_a_tab_in_it() -> None:
    values = {name: "1" for name in PENDING_FIELDS}
    values.update(JobArrayID="12", ArrayTaskID="N/A", Partition="cloud", Reason="Priority")
    values.update({"tres-alloc": "cpu=1,node=1", "TimeLimit": "1:00", "Feature": "(null)"})
    line = "\t".join(values[name] for name in PENDING_FIELDS)
    cases = {
        f"{line}\t(null)\t": "",
        f"{line}\tclustermgr: unfit: x\t": "clustermgr: unfit: x",
        f"{line}\tmine\twith a tab\t": "mine\twith a tab",
        line: "",  # no Comment field at all
    }
    for text, comment in cases.items():
        (pending,) = parse_pending(text)
        assert pending.comment == comment, text


def test_the_dry_run_shows_every_job_and_counts_an_array_s_tasks() -> None:
    plan = planned(
        [
            job("4_[1-50]", gpus_per_node=1, array_tasks=50),
            job("7", gpus_per_node=1),
            job("8", gpus_per_node=1),
            job("9", gpus_per_node=3),
            job("10", partition="onprem"),
        ],
        Plan(
            launches=[
                LaunchOrder("gpu", ("g1", "g2"), "on-demand", "r-1", "qd", ("4_[1-50]", "7", "8"))
            ]
        ),
    )
    rows = {row["action"]: row for row in plan_rows(plan)}
    served = rows["served"]
    assert served["jobs"] == ["4_[1-50]", "7", "8"]
    assert served["count"] == served["tasks"] == 52
    assert served["target"] == "jobs 4_[1-50],7,8"
    assert served["reason"] == "waiting for gpu nodes g[1-2], launched for it"
    assert rows["unfit"]["jobs"] == ["9"]
    assert rows["other"]["jobs"] == ["10"]


def test_a_job_whose_reason_our_write_cleared_still_waits_for_nodes() -> None:
    """A comment update leaves the job's Slurm reason None until Slurm judges it again:
    with our comment it still counts as waiting for nodes (queue_depth launches for it),
    so its verdict does not flip; a None reason without our comment does not."""
    said = "clustermgr: waiting: on nodes of gpu that are up, coming or at their limit"
    assert updates([job("1", gpus_per_node=1, reason="None", comment=said)], Plan()) == {}
    plan = planned([job("1", gpus_per_node=1, reason="None", comment=said)], Plan())
    queue_depth = [PolicyRef(name="queue_depth")]
    assert run(queue_depth, view([slot("g1")], [job("1", reason="None", comment=said)])).launches
    assert not run(queue_depth, view([slot("g1")], [job("1", reason="None")])).launches
    assert [f.status for f in plan.jobs] == ["waiting"]

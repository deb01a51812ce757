"""All or nothing per job (issue 24 item 1), on hand-made views: queue_depth's per-job
launches, clamp's whole orders and whole alternates, and the config default."""

from __future__ import annotations

import pytest

from clustermgr.config import PolicyRef, TemplateSettings, parse_settings
from clustermgr.nodes.states import NodeState
from clustermgr.policy import NodeView, TemplateView
from clustermgr.policy.decision import Launch, ScaleDecision
from clustermgr.scaling.clamp import clamp
from clustermgr.workload.base import PendingJob, WorkloadNode
from tests.unit.test_policies import SLOTS, job, run, slot, template, view

pytestmark = pytest.mark.unit

SETTINGS = parse_settings({"providers": [{"name": "aws1", "type": "aws", "region": "r"}]})
WHOLE = {"gpu": template(all_or_nothing=True, max_nodes=8)}


def queue_depth(
    nodes: list[NodeView], pending: list[PendingJob], templates: dict[str, TemplateView] = WHOLE
) -> ScaleDecision:
    return run([PolicyRef(name="queue_depth")], view(nodes, pending, templates=templates))


def test_each_multi_node_job_gets_a_launch_of_its_own_and_single_nodes_share_one() -> None:
    slots = [slot(f"g{i}") for i in range(1, 9)]
    decision = queue_depth(slots, [job("1", nodes=4), job("2"), job("3", nodes=2), job("4")])
    launches = [(x.count, x.jobs, x.together) for x in decision.launches]
    assert launches == [(4, ("1",), True), (2, ("3",), True), (2, ("2", "4"), False)]


def test_on_a_best_effort_template_the_jobs_share_one_launch_as_before() -> None:
    slots = [slot(f"g{i}") for i in range(1, 9)]
    decision = queue_depth(slots, [job("1", nodes=4), job("2")], {"gpu": template(max_nodes=8)})
    assert [(x.count, x.jobs, x.together) for x in decision.launches] == [(5, ("1", "2"), False)]


def test_nodes_coming_go_to_the_first_whole_job_and_are_not_counted_twice() -> None:
    coming = [slot(f"g{i}", NodeState.BOOTING) for i in range(1, 5)]
    slots = coming + [slot(f"g{i}") for i in range(5, 9)]
    decision = queue_depth(slots, [job("1", nodes=4), job("2", nodes=4)])
    assert [(x.count, x.jobs) for x in decision.launches] == [(4, ("2",))]


def test_a_booting_node_slurm_already_gave_another_job_is_not_coming_for_pending_ones() -> None:
    """docs/reliability.md's queue_depth flaw: a node still booting whose Slurm state says a
    job is on it (ALLOCATED) serves that job, not the pending one."""
    busy = WorkloadNode("g1", "ALLOCATED", frozenset({"CLOUD", "POWERING_UP"}))
    nodes = [slot("g1", NodeState.BOOTING, slurm=busy), *SLOTS[1:]]
    decision = queue_depth(nodes, [job("9")], {"gpu": template()})
    assert [(x.count, x.jobs) for x in decision.launches] == [(1, ("9",))]
    free = [slot("g1", NodeState.BOOTING), *SLOTS[1:]]
    assert queue_depth(free, [job("9")], {"gpu": template()}).launches == ()


def test_clamp_drops_a_whole_job_it_cannot_give_every_node_and_says_why() -> None:
    slots = [slot(f"g{i}") for i in range(1, 7)]
    v = view(slots, [], templates=WHOLE)
    decision = ScaleDecision(
        launches=(
            Launch("gpu", 4, "job 1", jobs=("1",), together=True),
            Launch("gpu", 4, "job 2", jobs=("2",), together=True),
        )
    )
    plan = clamp(decision, v, SETTINGS)
    [order] = plan.launches
    assert order.all_or_nothing and order.nodes == ("g1", "g2", "g3", "g4")
    assert plan.notes == [
        "clamp: gpu: only 2 of 4 wanted nodes have a powered-down slot",
        "clamp: gpu: all-or-nothing: jobs 2 need 4 nodes, 2 may launch "
        "(max_nodes = 8 (4 active or planned) or free slots): none launched",
    ]


def test_a_whole_job_falls_back_only_to_a_template_with_room_for_all_of_it() -> None:
    templates = {
        "gpu": template(all_or_nothing=True, fallbacks=("small", "big")),
        "small": template("small", max_nodes=2),
        "big": template("big", max_nodes=4),
    }
    slots = [slot(f"g{i}") for i in range(1, 5)]
    slots += [slot(f"s{i}", template="small") for i in (1, 2)]
    slots += [slot(f"b{i}", template="big") for i in range(1, 5)]
    v = view(slots, [], templates=templates)
    decision = ScaleDecision(launches=(Launch("gpu", 4, "j", jobs=("1",), together=True),))
    [order] = clamp(decision, v, SETTINGS).launches
    [alternate] = order.alternates
    assert (alternate.template, alternate.nodes) == ("big", ("b1", "b2", "b3", "b4"))
    assert alternate.all_or_nothing and alternate.jobs == ("1",)
    loose = Launch("gpu", 4, "j", jobs=("1",))  # not one job's nodes: best effort
    [order] = clamp(ScaleDecision(launches=(loose,)), v, SETTINGS).launches
    assert not order.all_or_nothing
    assert [a.template for a in order.alternates] == ["small", "big"]


@pytest.mark.parametrize(
    ("gpus", "strategy", "whole"),
    [(8, None, True), (0, None, False), (8, "best-effort", False), (0, "all-or-nothing", True)],
)
def test_the_strategy_defaults_to_all_or_nothing_for_templates_with_gpus(
    gpus: int, strategy: str | None, whole: bool
) -> None:
    data = {
        "name": "t",
        "provider": "aws1",
        "instance_types": ["p4d.24xlarge"],
        "image": "ami-1",
        "partition": "gpu",
        "nodes": "t-[1-4]",
        "cpus": 8,
        "memory_mb": 1000,
        "gpus": gpus,
        "gpu_model": "a100" if gpus else None,
    }
    if strategy:
        data["scaling_strategy"] = strategy
    assert TemplateSettings.model_validate(data).all_or_nothing is whole


def test_slurm_mode_resume_requests_are_grouped_per_job_from_the_resume_file() -> None:
    """Slurm mode: the nodes SLURM_RESUME_FILE names for one job are one launch, together;
    a job of one node and nodes no job names share the plain launch."""
    from clustermgr.scaling.decide import initial_decision

    requested = [slot(f"g{i}", NodeState.REQUESTED) for i in range(1, 8)]
    asked = {"g1": ("7",), "g2": ("7",), "g3": ("7",), "g4": ("8",), "g5": ("9",), "g6": ("9",)}
    v = view(requested, [], templates=WHOLE, resume_requests=asked)
    launches = [(x.nodes, x.jobs, x.together) for x in initial_decision(v).launches]
    assert launches == [
        (("g1", "g2", "g3"), ("7",), True),
        (("g5", "g6"), ("9",), True),
        (("g4", "g7"), ("8",), False),
    ]
    v = view(requested, [], templates={"gpu": template()}, resume_requests=asked)
    [launch] = initial_decision(v).launches  # best effort: one launch, as before
    assert len(launch.nodes) == 7 and not launch.together


def test_nodes_slurm_powered_up_before_their_resume_request_arrived_go_with_their_job() -> None:
    """Slurm shows a job's nodes powering up before its hook's request reaches cm-scale
    (the cycle judges them "a resume request we missed", with no job): the job Slurm is
    configuring on them still makes them one launch, together."""
    from clustermgr.scaling.decide import initial_decision
    from clustermgr.workload.base import RunningJob

    requested = [slot(f"g{i}", NodeState.REQUESTED) for i in range(1, 4)]
    configuring = (RunningJob(job_id="5", nodes=("g1", "g2"), end_time=None),)
    v = view(requested, [], templates=WHOLE, running=configuring)
    launches = [(x.nodes, x.jobs, x.together) for x in initial_decision(v).launches]
    assert launches == [(("g1", "g2"), ("5",), True), (("g3",), (), False)]


def test_a_bad_item_of_the_resume_file_is_skipped_with_a_warning_the_rest_kept() -> None:
    from clustermgr.workload.hooks import parse_resume_file

    warned: list[str] = []
    text = (
        '{"jobs": [{"job_id": 7, "nodes": "g[1-3]"}, {"job_id": "x;rm", "nodes": "g4"},'
        ' {"job_id": 8, "nodes": "g[5-"}, {"job_id": 9, "nodes": "other1"}, 5,'
        ' {"job_id": 10, "nodes": "g6"}], "all_nodes": "g[1-6]"}'
    )
    jobs = parse_resume_file(text, {f"g{i}" for i in range(1, 7)}, warned.append)
    assert jobs == {"7": ("g1", "g2", "g3"), "10": ("g6",)}
    assert warned == [
        "SLURM_RESUME_FILE jobs[1]: job_id 'x;rm' is not a job id: skipped",
        "SLURM_RESUME_FILE jobs[2]: nodes 'g[5-' is not a Slurm hostlist: skipped",
        "SLURM_RESUME_FILE jobs[3]: nodes other1 are not in the hook's node list: skipped",
        "SLURM_RESUME_FILE jobs[4]: not an object: skipped",
    ]
    assert parse_resume_file("{", warn=warned.append) == {}
    assert warned[-1].startswith("SLURM_RESUME_FILE is not JSON (")


def test_the_resume_file_as_slurm_22_05_writes_it_groups_by_nodes_resume() -> None:
    """slurmctld 22.05 names a job's nodes to resume `nodes_resume` (and all of its nodes,
    some up already, `nodes_alloc`): the group is the nodes resumed for the job."""
    from clustermgr.workload.hooks import parse_resume_file

    text = (
        '{"all_nodes_resume": "g[1-3]", "jobs": [{"extra": null, "features": null,'
        ' "job_id": 12, "nodes_alloc": "g[1-4]", "nodes_resume": "g[1-3]",'
        ' "oversubscribe": "OK", "partition": "gpu", "reservation": null}]}'
    )
    assert parse_resume_file(text, {"g1", "g2", "g3"}) == {"12": ("g1", "g2", "g3")}

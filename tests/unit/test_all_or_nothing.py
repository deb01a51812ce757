"""All or nothing per job (issue 24 item 1), on hand-made views: queue_depth's per-job
launches, clamp's whole orders and whole alternates, and the config default."""

from __future__ import annotations

import pytest

from clustermgr.config import PolicyRef, TemplateSettings, parse_settings
from clustermgr.lifecycle import NodeState
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

"""The built-in policies on hand-made views: pure data in, a decision out."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clustermgr.config import PolicyRef
from clustermgr.core.errors import ConfigError
from clustermgr.nodes.states import NodeState
from clustermgr.policy import (
    BillingRule,
    ClusterView,
    LaunchFailure,
    NodeView,
    Price,
    TemplateView,
)
from clustermgr.policy.chain import PolicyRunner
from clustermgr.policy.decision import Launch, ScaleDecision
from clustermgr.policy.loader import load_chain, load_policy
from clustermgr.workload.base import PendingJob, WorkloadNode

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def template(name: str = "gpu", **kw: object) -> TemplateView:
    base = TemplateView(
        name=name,
        provider="aws1",
        provider_type="aws",
        region="us-east-1",
        partition="cloud",
        instance_types=("p4d.24xlarge",),
        cpus=8,
        memory_mb=64000,
        gpus=8,
        gpu_model="a100",
        features=frozenset({"a100", "aws1", "us-east-1", name}),
        max_nodes=4,
        market="on-demand",
        demand_mode="policy",
        boot_timeout_s=600,
        prices={"p4d.24xlarge": Price(30.0, 10.0)},
        billing=BillingRule(1, 60),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def slot(name: str, state: NodeState = NodeState.POWERED_DOWN, **kw: object) -> NodeView:
    slurm = WorkloadNode(name, "IDLE", frozenset({"CLOUD", "POWERED_DOWN"}))
    if state is NodeState.UP:
        slurm = WorkloadNode(name, "IDLE", frozenset({"CLOUD"}))
    base = NodeView(name=name, kind="cloud", state=state, template="gpu", slurm=slurm)
    return replace(base, **kw)  # type: ignore[arg-type]


def job(job_id: str, **kw: object) -> PendingJob:
    base = PendingJob(
        job_id=job_id,
        partition="cloud",
        nodes=1,
        tasks=1,
        cpus_per_node=8,
        memory_per_node_mb=1000,
        gpus_per_node=8,
        gpu_model=None,
        gpus_per_job=0,
        features=(),
        time_limit_min=60,
        submit_time=NOW - timedelta(minutes=5),
        reason="Resources",
        estimated_start=None,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def view(nodes: list[NodeView], pending: list[PendingJob], **kw: object) -> ClusterView:
    base = ClusterView(
        now=NOW,
        templates={"gpu": template()},
        nodes={n.name: n for n in nodes},
        pending=tuple(pending),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def run(policies: list[PolicyRef], v: ClusterView) -> ScaleDecision:
    result = PolicyRunner(load_chain(policies), 2.0).run(v)
    assert result.error is None, result.error
    return result.decision


SLOTS = [slot(f"g{i}") for i in range(1, 5)]


def test_queue_depth_counts_fitting_jobs_and_lists_unfit_ones() -> None:
    pending = [
        job("1"),
        job("2", nodes=2),
        job("3", gpus_per_node=16),
        job("4", reason="JobHeldUser"),
        job("5", partition="batch"),
        job("6", features=("v100",)),
    ]
    decision = run([PolicyRef(name="queue_depth")], view(SLOTS, pending))
    [launch] = decision.launches
    assert (launch.template, launch.count, launch.jobs) == ("gpu", 3, ("1", "2"))
    assert decision.unfit["3"] == "needs 16 GPUs per node, gpu has 8"
    assert decision.unfit["6"] == "needs features v100, gpu lacks them"
    assert "4" not in decision.unfit and "5" not in decision.unfit


def test_queue_depth_subtracts_coming_and_idle_nodes_and_respects_age() -> None:
    nodes = [slot("g1", NodeState.BOOTING), slot("g2", NodeState.UP), *SLOTS[2:]]
    pending = [job(str(i)) for i in range(3)]
    decision = run([PolicyRef(name="queue_depth")], view(nodes, pending))
    assert decision.launching() == 1
    young = run(
        [PolicyRef(name="queue_depth", options={"min_pending_s": 600})], view(SLOTS, pending)
    )
    assert young.launches == ()


def test_queue_depth_packs_small_jobs_and_counts_array_tasks() -> None:
    pending = [job("7_[1-10]", gpus_per_node=1, cpus_per_node=1, array_tasks=10)]
    decision = run([PolicyRef(name="queue_depth")], view(SLOTS, pending))
    assert decision.launching() == 2  # 8 one-GPU tasks per 8-GPU node


def test_idle_timeout_waits_for_the_limit_and_the_paid_period() -> None:
    idle = slot(
        "g1",
        NodeState.UP,
        idle_since=NOW - timedelta(minutes=11),
        launched_at=NOW - timedelta(minutes=40),
    )
    fresh = slot(
        "g2",
        NodeState.UP,
        idle_since=NOW - timedelta(minutes=2),
        launched_at=NOW - timedelta(minutes=40),
    )
    decision = run(
        [PolicyRef(name="idle_timeout", options={"minutes": 10})], view([idle, fresh], [])
    )
    assert [s.node for s in decision.stops] == ["g1"]
    hourly = {"gpu": template(billing=BillingRule(3600, 3600))}
    kept = run(
        [PolicyRef(name="idle_timeout", options={"minutes": 10})],
        view([idle], [], templates=hourly),
    )
    assert kept.stops == ()  # 20 paid minutes left in the hour
    late = replace(idle, launched_at=NOW - timedelta(minutes=59))
    pinned = [PolicyRef(name="idle_timeout", options={"minutes": 10})]
    stopped = run(pinned, view([late], [], templates=hourly))
    assert [s.node for s in stopped.stops] == ["g1"]
    # break-even (no `minutes`): a restart is billed a whole hour, so an hour's idling is
    # what stopping saves; kept 11 minutes in, stopped at the end of the second paid hour
    kept = run([PolicyRef(name="idle_timeout")], view([late], [], templates=hourly))
    assert kept.stops == ()
    later = replace(
        late,
        idle_since=NOW - timedelta(minutes=61),
        launched_at=late.launched_at - timedelta(hours=1),
    )
    stopped = run([PolicyRef(name="idle_timeout")], view([later], [], templates=hourly))
    assert [s.reason for s in stopped.stops] == [
        "idle_timeout: idle 61 min (break-even: a restart is billed at least 60 min)"
    ]


def test_idle_timeout_stops_at_break_even_unless_a_pending_job_can_use_the_node() -> None:
    def up(name: str, idle_min: float) -> NodeView:
        return slot(
            name,
            NodeState.UP,
            idle_since=NOW - timedelta(minutes=idle_min),
            launched_at=NOW - timedelta(minutes=60),
        )

    idle = [up("g1", 11), up("g2", 5), up("g3", 9.5)]
    booting = [
        slot(f"b{i}", NodeState.BOOTING, launched_at=NOW - timedelta(minutes=2)) for i in range(3)
    ]
    policy = [PolicyRef(name="idle_timeout")]

    def stops(nodes: list[NodeView], pending: list[PendingJob]) -> list[tuple[str, str]]:
        return sorted((s.node, s.reason) for s in run(policy, view(nodes, pending)).stops)

    # per-second billing, 10-minute boots, 3 nodes launched in the last boot time: each
    # idle node stops at its own randomized break-even in [0, 10] min (g2's is 8.0 min)
    assert stops(idle + booting, []) == [
        ("g1", "idle_timeout: idle 11 min (randomized break-even 0.3 of a 10-min boot)"),
        ("g3", "idle_timeout: idle 10 min (randomized break-even 9.0 of a 10-min boot)"),
    ]
    # one launch in the last boot time: one idle node (the last to go idle) is kept for it
    why = "3 idle, 1 launched in the last 10 min"
    assert stops(idle + booting[:1], []) == [
        ("g1", f"idle_timeout: idle 11 min ({why})"),
        ("g3", f"idle_timeout: idle 10 min ({why})"),
    ]
    # a 2-node job waiting (for a second node) keeps them all
    assert stops(idle, [job("7", nodes=2)]) == []
    # demand the nodes cannot serve keeps none: a job wider than the nodes up or coming,
    # one that fits no node of the template
    assert len(stops(idle, [job("8", nodes=4), job("9", gpus_per_node=16)])) == 3


def test_idle_timeout_never_stops_a_node_whose_job_is_still_completing() -> None:
    # Slurm shows `IDLE+COMPLETING` while the epilog runs; stopping then would kill the
    # slurmd the job's end waits for, and the job would hang in CG
    completing = slot(
        "g1",
        NodeState.UP,
        slurm=WorkloadNode("g1", "IDLE", frozenset({"CLOUD", "COMPLETING"})),
        idle_since=NOW - timedelta(minutes=11),
        launched_at=NOW - timedelta(minutes=40),
    )
    assert not completing.idle
    decision = run(
        [PolicyRef(name="idle_timeout", options={"minutes": 10})], view([completing], [])
    )
    assert decision.stops == ()


def test_min_max_keeps_warm_nodes_and_caps_launches() -> None:
    warm = run([PolicyRef(name="min_max", options={"template": "gpu", "min": 2})], view(SLOTS, []))
    assert warm.launching("gpu") == 2
    pending = [job(str(i)) for i in range(4)]
    capped = run(
        [
            PolicyRef(name="queue_depth"),
            PolicyRef(name="min_max", options={"template": "gpu", "max": 1}),
        ],
        view(SLOTS, pending),
    )
    assert capped.launching("gpu") == 1 and "at most 1" in capped.refusals[0].reason


def test_budget_cap_counts_running_rate_and_committed_cost() -> None:
    running = slot(
        "g1",
        NodeState.UP,
        launched_at=NOW - timedelta(minutes=30),
        jobs_end=NOW + timedelta(hours=2),
        market="on-demand",
    )
    pending = [job(str(i)) for i in range(3)]
    chain = [PolicyRef(name="queue_depth"), PolicyRef(name="budget_cap", options={"hourly": 70})]
    decision = run(chain, view([running, *SLOTS[1:]], pending))
    assert decision.launching() == 1  # $30/h running + 1 x $30/h <= $70/h
    assert "budget_cap: 1 of 2 nodes refused" in decision.refusals[0].reason
    monthly = [
        PolicyRef(name="queue_depth"),
        PolicyRef(name="budget_cap", options={"monthly": 100}),
    ]
    month = run(monthly, view([running, *SLOTS[1:]], pending, month_spend=20))
    # committed: $20 spent + $30/h x 2.5 h = $95, so not even one more hour of $30 fits
    assert month.launching() == 0


def test_onprem_first_holds_jobs_that_start_soon() -> None:
    soon = job("1", estimated_start=NOW + timedelta(minutes=5))
    later = job("2", estimated_start=NOW + timedelta(hours=3))
    chain = [PolicyRef(name="onprem_first", options={"minutes": 15}), PolicyRef(name="queue_depth")]
    decision = run(chain, view(SLOTS, [soon, later]))
    assert decision.launches[0].jobs == ("2",) and "1" in decision.held


def test_spot_fallback_after_capacity_failure_or_long_wait() -> None:
    spot = {"gpu": template(market="spot")}
    chain = [
        PolicyRef(name="queue_depth"),
        PolicyRef(name="spot_fallback", options={"wait_min": 10}),
    ]
    assert run(chain, view(SLOTS, [job("1")], templates=spot)).launches[0].market == "spot"
    failed = [LaunchFailure("gpu", "CAPACITY", "spot", NOW - timedelta(minutes=3))]
    after = run(chain, view(SLOTS, [job("1")], templates=spot, failures=failed))
    assert after.launches[0].market == "on-demand"
    waited = job("1", submit_time=NOW - timedelta(minutes=30))
    assert run(chain, view(SLOTS, [waited], templates=spot)).launches[0].market == "on-demand"


class Raises:
    name = "raises"

    def decide(self, view: ClusterView) -> ScaleDecision:
        raise RuntimeError("boom")


class Hangs:
    name = "hangs"

    def decide(self, view: ClusterView) -> ScaleDecision:
        time.sleep(5)
        return view.proposed


class Garbage:
    name = "garbage"

    def decide(self, view: ClusterView) -> object:
        return {"launch": 5}


class UnknownTemplate:
    name = "unknown"

    def decide(self, view: ClusterView) -> ScaleDecision:
        return view.proposed.add(Launch("nope", 1, "x"))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Raises(), "policy raises: raised RuntimeError: boom"),
        (Hangs(), "policy hangs: did not decide within 0.3 s"),
        (Garbage(), "policy garbage: returned dict, not a ScaleDecision"),
        (UnknownTemplate(), "policy unknown: launch names unknown template 'nope'"),
    ],
)
def test_a_failing_policy_voids_the_cycle_and_is_named(bad: object, message: str) -> None:
    chain = [*load_chain([PolicyRef(name="queue_depth")]), bad]
    result = PolicyRunner(chain, 0.3).run(view(SLOTS, [job("1")]))  # type: ignore[arg-type]
    assert result.error == message
    assert result.decision.launches == ()


def test_policies_are_pure() -> None:
    v = view(SLOTS, [job("1"), job("2", nodes=2)])
    chain = [PolicyRef(name="queue_depth"), PolicyRef(name="budget_cap", options={"hourly": 100})]
    assert run(chain, v) == run(chain, v)


def test_loader_errors_are_one_line(tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="policy 'nope': not built in"):
        load_policy(PolicyRef(name="nope"))
    with pytest.raises(
        ConfigError,
        match=r"'idle_timeout': unknown option\(s\) minutse; its options: minutes, margin_s$",
    ):
        load_policy(PolicyRef(name="idle_timeout", options={"minutse": 3}))
    needy = Path(str(tmp_path)) / "needy.py"
    needy.write_text(
        "class Needy:\n    name = 'needy'\n"
        "    def __init__(self, limit: int, slack: int = 0):\n        self.limit = limit\n"
        "    def decide(self, view):\n        return None\n"
    )
    with pytest.raises(
        ConfigError, match=r"policy 'needy': missing option\(s\) limit; its options: limit, slack$"
    ):
        load_policy(PolicyRef(name="needy", path=str(needy)))


def test_pending_reasons_in_either_spelling_count_as_lack_of_resources() -> None:
    from clustermgr.policy.fit import lacks_resources

    spaced = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority"
    for reason in ("Resources", "Priority", "ReqNodeNotAvail, UnavailableNodes:c[1-4]", spaced):
        assert lacks_resources(job("1", reason=reason))
    for reason in ("JobHeldUser", "Dependency", "BeginTime", "QOSMaxJobsPerUserLimit"):
        assert not lacks_resources(job("1", reason=reason))


def test_budget_cap_never_buys_part_of_a_wide_job() -> None:
    wide = job("wide", nodes=3)
    small = job("small")
    chain = [PolicyRef(name="queue_depth"), PolicyRef(name="budget_cap", options={"hourly": 70})]
    # $70/h buys 2 nodes: not the 3-node job (2 of its nodes would idle), but the small one
    decision = run(chain, view(SLOTS, [wide, small]))
    assert decision.launching() == 1
    assert "budget_cap: 3 of 4 nodes refused" in decision.refusals[0].reason
    alone = run(chain, view(SLOTS, [wide]))
    assert alone.launching() == 0


def test_queue_depth_asks_another_template_while_a_regions_director_is_not_ready() -> None:
    waiting = "(Code:DIRECTOR) waiting for director director-aws1-us-east-1 (booting)"
    other = template("west", region="us-west-2", features=frozenset({"a100"}))
    slots = [*SLOTS[:2], slot("w1", template="west"), slot("w2", template="west")]
    v = view(slots, [job("1")], templates={"gpu": template(waiting=waiting), "west": other})
    [launch] = run([PolicyRef(name="queue_depth")], v).launches
    assert launch.template == "west"


def test_queue_depth_buys_the_cheapest_fitting_template_unless_the_order_is_pinned() -> None:
    big = template("big", instance_types=("p5.48xlarge",), prices={"p5.48xlarge": Price(98.0)})
    small = template("gpu", gpus=4, prices={"p4d.24xlarge": Price(30.0)})
    roomy = template("roomy", gpus=4, memory_mb=512000, prices={"p4d.24xlarge": Price(30.0)})
    templates = {"big": big, "roomy": roomy, "gpu": small}
    pending = [job("1", gpus_per_node=4)]
    decision = run([PolicyRef(name="queue_depth")], view(SLOTS, pending, templates=templates))
    [launch] = decision.launches
    # $98/h and $30/h twice: the same price, the 64 GB node wastes less than the 512 GB one
    assert launch.template == "gpu"
    assert launch.reason.endswith("; cheapest fit: gpu $30.00/h, 33% waste (of 3 fitting)")
    pinned = [PolicyRef(name="queue_depth", options={"template_order": "config"})]
    [launch] = run(pinned, view(SLOTS, pending, templates=templates)).launches
    assert launch.template == "big"
    assert launch.reason.endswith("; config order: big, the first of 3 fitting")
    with pytest.raises(ConfigError, match="template_order 'cost': one of price, config"):
        load_policy(PolicyRef(name="queue_depth", options={"template_order": "cost"}))


def test_queue_depth_never_buys_a_templates_fallback_first_however_cheap() -> None:
    """`fallback_templates` is the admin's order: the fallback is the second choice."""
    dear = template("big", instance_types=("p5.48xlarge",), prices={"p5.48xlarge": Price(98.0)})
    templates = {"big": replace(dear, fallbacks=("gpu",)), "gpu": template(gpus=4)}
    pending = [job("1", gpus_per_node=4)]
    [launch] = run(
        [PolicyRef(name="queue_depth")], view(SLOTS, pending, templates=templates)
    ).launches
    assert launch.template == "big"
    # without the link, the cheaper one wins
    templates["big"] = dear
    [launch] = run(
        [PolicyRef(name="queue_depth")], view(SLOTS, pending, templates=templates)
    ).launches
    assert launch.template == "gpu"


def test_market_choice_puts_short_narrow_jobs_on_spot_and_long_wide_ones_on_demand() -> None:
    prices = {"p4d.24xlarge": Price(30.0, 10.0)}
    templates = {
        "gpu": template("gpu", market="spot", prices=prices, max_nodes=64),
        "gpu-od": template("gpu-od", prices=prices, max_nodes=64),
    }
    nodes = [
        *(slot(f"g{i}") for i in range(64)),
        *(slot(f"o{i}", template="gpu-od") for i in range(64)),
    ]
    pending = [
        job("short"),  # 1 node, 1 hour: a reclaim costs little
        job("wide", nodes=64, time_limit_min=600),  # 64 nodes, 10 hours: almost surely reclaimed
        job("once", requeue=False),
    ]
    chain = [
        PolicyRef(name="queue_depth"),
        PolicyRef(name="market_choice", options={"reclaim_per_hour": 0.01}),
    ]
    decision = run(chain, view(nodes, pending, templates=templates))
    by_template = {x.template: x for x in decision.launches}
    spot, od = by_template["gpu"], by_template["gpu-od"]
    assert (spot.market, spot.count, spot.jobs) == ("spot", 1, ("short",))
    assert (od.market, od.count, od.jobs) == ("on-demand", 65, ("wide", "once"))
    # 1 node-hour at $10: 0.01 reclaims expected, each redoing ~half an hour and a boot
    assert "spot: expected loss $0.07 < saving $20.00 (job short)" in spot.reason
    assert "on-demand: expected loss $" in od.reason and "(job wide)" in od.reason
    # without a pair (one template) nothing changes
    alone = {"gpu": templates["gpu"]}
    decision = run(chain, view(nodes[:64], pending[:1], templates=alone))
    assert [(x.template, x.market) for x in decision.launches] == [("gpu", None)]

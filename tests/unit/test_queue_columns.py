"""The fast paths of a long queue's per-cycle loops give the answers the per-job loops give:
queue_depth's count and the job accounting over random queues (shapes, reasons, submit
times, holds, arrays, unfit jobs, two templates), the column helpers they use, the replay's
ordered set of changed nodes and its start estimates left out for chains that never read
them."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from clustermgr.nodes.states import NodeState
from clustermgr.policy import ReasonMemo, ScaleDecision
from clustermgr.policy.queue import all_lack_resources, all_submitted_by, sum_in_order
from clustermgr.policy.view import ClusterView
from clustermgr.scaling.accounting import Grouping
from clustermgr.sim.model import OrderedNodes, Pool, Shape, SimJob, SimNode, occupy, release
from clustermgr.sim.replay import Replay
from clustermgr.sim.strategies import reclaims_possible, replay_of, replays, strategies, strategy
from clustermgr.workload.base import PendingJob
from policies.queue_depth import QueueDepth
from tests.unit.test_policies import NOW, job, template, view
from tests.unit.test_simulate import job as trace_job
from tests.unit.test_simulate import settings, trace

REASONS = ["Priority", "Resources", "Dependency", "None", "JobHeldUser"]


def random_queue(pick: random.Random, size: int, uniform: bool) -> list[PendingJob]:
    """A queue of `size` jobs; `uniform`: the kind the fast paths take (a few shapes that
    fit, lacking resources, submitted before now, no arrays)."""
    jobs = []
    for n in range(size):
        cpus = pick.choice([1, 2, 4, 8] if uniform else [1, 2, 8, 16])
        kw: dict[str, object] = {
            "cpus_per_node": cpus,
            "gpus_per_node": pick.choice([0, 1]),
            "nodes": pick.choice([1, 1, 2]),
            "reason": pick.choice(REASONS[:2] if uniform else REASONS),
            "submit_time": NOW - timedelta(seconds=pick.randint(0 if uniform else -60, 3600)),
        }
        if not uniform:
            kw["array_tasks"] = pick.choice([1, 1, 1, 3])
            kw["partition"] = pick.choice(["cloud", "cloud", "onprem"])
        jobs.append(job(f"j{n}", **kw))
    return jobs


def queue_view(pick: random.Random, jobs: list[PendingJob], two_templates: bool) -> ClusterView:
    templates = {"gpu": template()}
    if two_templates:  # a cheaper template of its own: small jobs go there
        templates["small"] = template("small", cpus=2, gpus=1)
    v = view([], jobs, templates=templates)
    held = {j.job_id: "held" for j in jobs if pick.random() < 0.1}
    return v.with_proposed(ScaleDecision(held=held) if held and pick.random() < 0.5 else v.proposed)


@pytest.mark.parametrize("seed", range(40))
def test_queue_depth_counts_a_queue_alike_column_wise_and_job_by_job(seed: int) -> None:
    pick = random.Random(seed)
    uniform = seed % 2 == 0
    jobs = random_queue(pick, pick.randint(1, 60), uniform)
    v = queue_view(pick, jobs, two_templates=seed % 4 == 1)
    for min_pending_s in (0.0, 600.0):
        policy = QueueDepth(min_pending_s=min_pending_s)
        each = policy.count(v, {}, ReasonMemo())
        fast = policy.count_uniform(v, {}, ReasonMemo())
        if fast is not None:
            assert fast == tuple(dict(part) for part in each)
    if uniform and not v.proposed.held:
        assert QueueDepth().count_uniform(v, {}, ReasonMemo()) is not None  # the common case


@pytest.mark.parametrize("seed", range(40))
def test_the_accounting_groups_a_queue_alike_column_wise_and_job_by_job(seed: int) -> None:
    pick = random.Random(seed)
    jobs = random_queue(pick, pick.randint(1, 60), uniform=seed % 2 == 0)
    v = queue_view(pick, jobs, two_templates=seed % 4 == 1)
    refused = {"gpu": "refused: protected"} if seed % 5 == 0 else {}
    each: dict[tuple[str, str], list[str]] = {}
    fast: dict[tuple[str, str], list[str]] = {}
    Grouping(v, v.proposed, refused, each).add_each(jobs)
    if Grouping(v, v.proposed, refused, fast).add_uniform(jobs):
        assert fast == each and len(fast) == 1
    else:
        assert fast == {}
        assert seed % 2 or seed % 4 == 1 or v.proposed.held  # a uniform queue takes it


def test_the_column_helpers_judge_the_whole_queue() -> None:
    jobs = [job("a", reason="Priority"), job("b", reason="Resources")]
    assert all_lack_resources(jobs, ReasonMemo())
    assert not all_lack_resources([*jobs, job("c", reason="Dependency")], ReasonMemo())
    assert not all_lack_resources([*jobs, job("c", reason="None")], ReasonMemo())  # by comment
    unknown = job("c", submit_time=None)
    assert all_submitted_by([*jobs, unknown], NOW, unknown_ok=True)
    assert not all_submitted_by([*jobs, unknown], NOW, unknown_ok=False)
    assert not all_submitted_by(jobs, NOW - timedelta(days=365), unknown_ok=True)
    assert sum_in_order([1, 2, 1], {1: 0.1, 2: 0.7}) == 0.0 + 0.1 + 0.7 + 0.1


def test_changed_nodes_are_walked_in_the_order_they_changed() -> None:
    shape = Shape(8, 0, 1000)
    nodes = [SimNode(f"n{i}", "cpu", shape, NodeState.POWERED_DOWN) for i in range(50)]
    changed = OrderedNodes(nodes[10:])
    changed.add(nodes[3])
    changed.add_all([nodes[12], nodes[0]])  # n12 is already there: it keeps its place
    assert [n.name for n in changed] == [f"n{i}" for i in range(10, 50)] + ["n3", "n0"]


def test_a_chain_that_never_reads_start_estimates_replays_alike_without_them() -> None:
    """queue_depth and idle_timeout say they never read Slurm's start estimates, so the
    replay works none out for them; worked out anyway, the figures are the same."""
    config = settings()
    jobs = [trace_job(i, i * 300, 3600 + 60 * i, nodes=1 + i % 3) for i in range(30)]
    chosen = strategy(config, "default")
    plain = Replay(config, trace(*jobs), chosen, 2)
    assert not plain.estimates
    forced = Replay(config, trace(*jobs), chosen, 2)
    forced.estimates = True
    assert plain.run().figures() == forced.run().figures()
    assert all(j.pending.estimated_start is None for j in plain.jobs)
    assert Replay(config, trace(*jobs), strategy(config, "onprem_first+queue_depth"), 2).estimates


@pytest.mark.parametrize("cap", [None, 3])
def test_reactive_bound_and_clairvoyant_from_one_replay_equal_their_own(cap: int | None) -> None:
    """The three baselines of one schedule come from one replay: every figure, every sample
    of the plot and the month's spend are what each strategy's own replay gives."""
    config = settings(billing={} if cap is None else {"max_instances": cap})
    jobs = trace(*(trace_job(i, i * 200, 1800 + 97 * i, nodes=1 + i % 4) for i in range(40)))
    chosen = strategies(config, [], compare=True)
    together = {s.name: (outcome, took) for s, outcome, took in replays(config, jobs, chosen, 2)}
    assert list(together) == ["static", "reactive", "bound", "clairvoyant", "default"]
    assert together["bound"][1] == together["clairvoyant"][1] == 0.0  # paid from reactive's
    month = datetime(2000, 1, 1, tzinfo=UTC)
    for name in ("reactive", "bound", "clairvoyant"):
        alone = replay_of(config, jobs, strategy(config, name), 2).run()
        shared = together[name][0]
        assert shared.figures() == alone.figures()
        assert shared.timeline == alone.timeline and shared.waits == alone.waits
        assert shared.month_spend(month) == alone.month_spend(month) > 0
    assert together["bound"][0].cost < together["reactive"][0].cost


def test_a_spot_template_gives_each_baseline_its_own_replay() -> None:
    config = settings(market="spot", spot_reclaim_per_hour=0.5)
    assert reclaims_possible(config)
    assert not reclaims_possible(settings(market="spot", spot_reclaim_per_hour=0.0))


@pytest.mark.parametrize("seed", range(20))
def test_a_pools_running_jobs_by_end_are_those_a_stable_sort_gives(seed: int) -> None:
    """The reservation's order of running jobs, kept as jobs are placed, begin and leave,
    is a stable sort of the pool's running jobs by estimated end, ties in placement order
    (ends repeat: time limits are round numbers)."""
    pick = random.Random(seed)
    shape = Shape(8, 0, 1000)
    pool = Pool(
        "cpu", shape, [SimNode(f"n{i}", "cpu", shape, NodeState.UP) for i in range(4)], False
    )
    jobs = [
        SimJob(i, f"j{i}", 0.0, 1, 1, 0, 0, pick.choice([600.0, 1200.0]), 60.0, "u", None)  # type: ignore[arg-type]
        for i in range(60)
    ]
    running: list[SimJob] = []
    for step in range(400):
        now = float(step * 10)
        waiting = [j for j in jobs if j not in running]
        if waiting and (not running or pick.random() < 0.55):
            job = pick.choice(waiting)
            job.start = None
            occupy(job, pool, [pick.choice(pool.nodes)], now)
            if pick.random() < 0.9:
                job.start = now + pick.choice([0.0, 300.0])  # begun (after a boot, maybe)
            running.append(job)
        elif running:
            job = pick.choice(running)
            release(job, pool, now)
            running.remove(job)
        if pick.random() < 0.3:  # a job placed earlier begins now
            for job in running:
                job.start = job.start or now
        expected = sorted(pool.running.values(), key=lambda j: (j.start or now) + j.estimate_s)
        assert pool.by_end(now) == expected

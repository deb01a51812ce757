"""The clairvoyant baseline on hand-made traces whose offline optimum is worked out by hand.

The on-prem nodes are kept busy by j0, so every other job bursts. Boots take 600 s; prices
of $3.6/h make a node-second cost $0.001, so costs read as paid seconds / 1000."""

from __future__ import annotations

import math
from typing import Any

import pytest

from clustermgr.config import Settings
from clustermgr.sim.clairvoyant import waste_captured
from clustermgr.sim.results import Figures
from clustermgr.sim.strategies import replay_of, strategies, strategy
from clustermgr.sim.traces import Trace, TraceJob
from tests.unit.test_simulate import PRICE, job
from tests.unit.test_simulate import settings as base_settings

SPOT = PRICE / 4


def settings(**simulate: Any) -> Settings:
    return base_settings(spot_reclaim_per_hour=0.05, **simulate)


def replay(config: Settings, name: str, *jobs: TraceJob, onprem: int = 1) -> Figures:
    busy = TraceJob("j0", 0, onprem, 0, 0, 0, None, 100_000, "", "u")  # holds on-prem
    trace = Trace("hand-made", "swf", [busy, *jobs], [], None)
    return replay_of(config, trace, strategy(config, name), onprem).run().figures()


def waits(figures: Figures) -> tuple[float, float, float]:
    return (figures.wait_mean_s, figures.wait_median_s, figures.wait_p95_s)


def test_each_gap_is_kept_warm_or_stopped_by_what_it_costs() -> None:
    """burst-01 runs j1 600-4200, j2 4500-8100 (it came while the node idled) and j3
    10700-14300. reactive pays 0-8700 and 10100-14900 (boots and 10 idle minutes): 13,500 s.
    The floor keeps the node through the 300 s gap (a stop and a boot would cost 600 s) and
    stops it for the 2,600 s one: 0-8100 and 10100-14300, 12,300 s."""
    config = settings()
    jobs = (job(1, 0, 3600), job(2, 4500, 3600), job(3, 10100, 3600))
    reactive = replay(config, "reactive", *jobs)
    floor = replay(config, "clairvoyant", *jobs)
    bound = replay(config, "bound", *jobs)
    assert reactive.paid_node_hours * 3600 == pytest.approx(13500)
    assert floor.paid_node_hours * 3600 == pytest.approx(12300)
    assert floor.cost == pytest.approx(12.3) and floor.launches == 2
    assert floor.used_node_hours == reactive.used_node_hours == pytest.approx(3)
    assert waits(floor) == waits(reactive)  # reactive's schedule, so reactive's waits
    captured = waste_captured(
        {f.strategy: f.cost for f in (reactive, floor, bound)} | {"static": 0.0}
    )
    assert captured == {
        "reactive": pytest.approx(0.0),
        "clairvoyant": pytest.approx(1.0),
        "bound": pytest.approx((13.5 - 10.8) / (13.5 - 12.3)),  # paying only the work: 225%
        "static": None,
    }


def test_jobs_sharing_a_node_keep_it_up_while_either_runs() -> None:
    """Two pods share a cloud node (4 of its 8 GPUs each): j1 runs 600-4200, j2 1000-4600.
    The node is needed 600-4600: the floor pays 0-4600, reactive 600 s more idle."""
    config = settings(gpus=8)
    pods = (job(1, 0, 3600, cpus=2, gpus=4), job(2, 1000, 3600, cpus=2, gpus=4))
    floor = replay(config, "clairvoyant", *pods)
    assert floor.launches == 1 and floor.paid_node_hours * 3600 == pytest.approx(4600)
    assert replay(config, "reactive", *pods).paid_node_hours * 3600 == pytest.approx(5200)


def test_an_hourly_billing_rule_keeps_a_node_through_a_paid_gap() -> None:
    """Billed per started hour: j1 runs 600-1600 and j2 3100-3200. reactive stops the node
    at 2200 and boots it again at 2500 (two hours billed); the floor keeps it warm through
    the 1,500 s gap, since the first hour is paid anyway (one hour)."""
    hourly = settings(billing={"billing_increment_s": 3600, "billing_minimum_s": 3600})
    jobs = (job(1, 0, 1000), job(2, 2500, 100))
    assert replay(hourly, "reactive", *jobs).cost == pytest.approx(7.2)
    floor = replay(hourly, "clairvoyant", *jobs)
    assert floor.cost == pytest.approx(3.6) and floor.launches == 1
    # billed per second, the same gap is cheaper stopped: 0-1600 and 2500-3200
    assert replay(settings(), "clairvoyant", *jobs).paid_node_hours * 3600 == pytest.approx(2300)


@pytest.mark.parametrize("config", ["spot twin", "spot template"])
def test_each_job_takes_spot_only_when_its_expected_rework_is_worth_the_price(
    config: str,
) -> None:
    """With a spot twin of the template, or a spot template whose type has an on-demand
    price (at a quarter of it, 0.05 reclaims per node-hour): a 1-node 1-hour job is cheaper
    on spot even with its expected rework; a 4-node 20-hour job meets e^4 - 1 = 53
    reclaims in expectation and is bought on-demand."""
    twin = config == "spot twin"
    chosen = settings(spot_twin=True) if twin else settings(market="spot")
    short, wide = job(1, 0, 3600), job(2, 0, 72000, nodes=4)
    floor = replay(chosen, "clairvoyant", short, wide, onprem=4)
    rate = 0.05 / 3600
    reclaims = math.expm1(rate * 3600)
    rework_s = reclaims / rate - 3600 + reclaims * 600  # lost work and re-boots, one node
    spot_s = 600 + 3600  # its boot and run, on spot
    on_demand_s = 4 * (600 + 72000)
    assert floor.cost == pytest.approx((SPOT * (spot_s + rework_s) + PRICE * on_demand_s) / 3600)
    assert floor.lost_node_hours == pytest.approx(rework_s / 3600)
    assert floor.reclaims == 0  # the schedule is replayed without them: their cost is expected
    if not twin:
        return
    reactive = replay(chosen, "reactive", short, wide, onprem=4)  # the first template: on-demand
    assert reactive.cost == pytest.approx(PRICE * (600 + 3600 + 600 + 4 * (600 + 72600)) / 3600)


def test_compare_adds_the_clairvoyant_baseline() -> None:
    chosen = strategies(settings(), [], compare=True)
    assert [s.name for s in chosen] == ["static", "reactive", "bound", "clairvoyant", "default"]

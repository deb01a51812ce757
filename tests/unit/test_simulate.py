"""The replay: scheduler, baselines and the real policy chain on tiny synthetic traces whose
right answers can be worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.core.errors import ConfigError, UsageError
from clustermgr.sim.replay import Replay
from clustermgr.sim.results import Figures
from clustermgr.sim.strategies import replay_of, strategies, strategy
from clustermgr.sim.traces import Trace, TraceJob

PRICE = 3.6  # $/hour: 0.001 $/s, so costs read as seconds


def settings(**simulate: Any) -> Settings:
    chain = simulate.pop("chain", None)
    market = simulate.pop("market", "on-demand")
    gpus = simulate.pop("gpus", 0)
    fallback = simulate.pop("fallback", None)  # a fallback template of this max_nodes
    mode = simulate.pop("demand_mode", "policy")
    spot_twin = simulate.pop("spot_twin", False)  # a spot template of the same shape
    billing = simulate.pop("billing", {})  # the provider's billing override
    template: dict[str, Any] = {
        "name": "burst",
        "provider": "aws",
        "partition": "cloud",
        "nodes": "burst-[01-20]",
        "instance_types": ["m5.large"],
        "image": "ami-0",
        "cpus": 8,
        "memory_mb": 32000,
        "market": market,
        "demand_mode": mode,
        "prices": {"m5.large": {"on_demand": PRICE, "spot": PRICE / 4}},
    }
    if gpus:
        template.update(gpus=gpus, gpu_model="a100")
    templates = [template]
    if spot_twin:
        templates.append({**template, "name": "cheap", "nodes": "cheap-[01-20]", "market": "spot"})
    if fallback is not None:
        template["fallback_templates"] = ["spare"]
        templates.append(
            {**template, "name": "spare", "nodes": "spare-[1-5]", "max_nodes": fallback}
        )
        del templates[1]["fallback_templates"]
    return parse_settings(
        {
            "providers": [{"name": "aws", "type": "aws", "region": "us-east-1", **billing}],
            "templates": templates,
            "policy": {
                "chain": chain
                if chain is not None
                else [
                    {"name": "queue_depth"},
                    {"name": "idle_timeout", "options": {"minutes": 10}},
                ]
            },
            "simulate": {"default_boot_delay_s": 600, "tick_s": 30, **simulate},
        }
    )


def job(
    n: int,
    submit: float,
    run: float,
    nodes: int = 1,
    requested: float | None = None,
    cpus: int = 0,
    gpus: int = 0,
) -> TraceJob:
    return TraceJob(f"j{n}", submit, nodes, cpus, gpus, 0, requested, run, "", "u")


def trace(*jobs: TraceJob) -> Trace:
    return Trace("synthetic", "swf", sorted(jobs, key=lambda j: j.submit_s), [], None)


def replay(config: Settings, name: str, onprem: int, *jobs: TraceJob) -> tuple[Figures, Replay]:
    sim = replay_of(config, trace(*jobs), strategy(config, name), onprem)
    return sim.run().figures(), sim


def starts(sim: Replay) -> dict[str, float]:
    return {j.job_id: -1 if j.first_start is None else j.first_start - j.submit for j in sim.jobs}


def test_static_is_first_come_first_served() -> None:
    figures, sim = replay(settings(), "static", 2, *(job(n, 0, 3600) for n in range(4)))
    assert starts(sim) == {"j0": 0, "j1": 0, "j2": 3600, "j3": 3600}
    assert figures.wait_mean_s == 1800
    assert figures.cost == 0 and figures.cloud_jobs == 0
    assert figures.onprem_utilisation == pytest.approx(1.0)


def test_easy_backfill_never_delays_the_first_waiting_job() -> None:
    jobs = [
        job(1, 0, 100, requested=100),
        job(2, 1, 100, nodes=2, requested=100),  # waits for j1: reserved at 100
        job(3, 2, 50, requested=50),  # ends before 100: backfills now
        job(4, 3, 500, requested=500),  # would delay j2: waits
    ]
    _, sim = replay(settings(), "static", 2, *jobs)
    began = {j.job_id: j.first_start for j in sim.jobs}
    assert began == {"j1": 0, "j2": 100, "j3": 2, "j4": 200}


def test_reactive_pays_the_boot_and_ten_idle_minutes() -> None:
    figures, sim = replay(settings(), "reactive", 1, job(1, 0, 3600), job(2, 0, 3600))
    assert starts(sim) == {"j1": 0, "j2": 600}  # the second job waits for a cloud boot
    assert figures.paid_node_hours * 3600 == pytest.approx(600 + 3600 + 600)
    assert figures.cost == pytest.approx(4.8)
    assert figures.used_node_hours == pytest.approx(1.0)
    assert figures.launches == 1


def test_bound_pays_only_the_work() -> None:
    figures, sim = replay(settings(), "bound", 1, job(1, 0, 3600), job(2, 0, 3600))
    assert starts(sim)["j2"] == 600
    assert figures.paid_node_hours == pytest.approx(figures.used_node_hours) == pytest.approx(1)
    assert figures.cost == pytest.approx(3.6)


def test_policy_chain_launches_for_the_queue_and_stops_idle_nodes() -> None:
    figures, sim = replay(settings(), "default", 1, job(1, 0, 3600), job(2, 0, 3600))
    # queue_depth launches at the job's arrival; the job starts when the node has booted
    assert starts(sim) == {"j1": 0, "j2": 600}
    assert figures.launches == 1 and figures.cloud_jobs == 1
    # idle_timeout stops it 10 minutes after its job, at the next 30 s tick or event
    assert 4800 <= figures.paid_node_hours * 3600 <= 4800 + 30
    assert figures.policy_errors == 0


def test_onprem_first_holds_a_job_that_starts_on_prem_before_a_boot() -> None:
    chain = [
        {"name": "onprem_first", "options": {"minutes": 15}},
        {"name": "queue_depth"},
        {"name": "idle_timeout"},
    ]
    config = settings(chain=chain)
    # j2 would wait 300 s on-prem (j1's time limit), less than a 600 s boot: no burst
    figures, sim = replay(config, "default", 1, job(1, 0, 300, requested=300), job(2, 0, 60))
    assert figures.launches == 0 and starts(sim)["j2"] == 300
    # with a 2-hour wait ahead, it bursts
    figures, sim = replay(config, "default", 1, job(1, 0, 7200, requested=7200), job(2, 0, 60))
    assert figures.launches == 1 and starts(sim)["j2"] == 600


def test_onprem_first_learns_run_times_from_the_jobs_the_replay_has_finished() -> None:
    # three jobs of user u run 5 minutes of a 2-hour limit, one after another; a fourth
    # like them runs when j4 arrives: Slurm's estimate is its limit (2 h), the history's 5 min
    learned = [job(n, n * 1000, 300, requested=7200) for n in range(4)]
    arrives = job(4, 3001, 60, requested=60)
    chain = [
        {"name": "onprem_first", "options": {"minutes": 15}},
        {"name": "queue_depth"},
        {"name": "idle_timeout"},
    ]
    figures, sim = replay(settings(chain=chain), "default", 1, *learned, arrives)
    assert figures.launches == 0 and starts(sim)["j4"] == 299  # held, then on-prem
    assert sim.history.recorded == 5
    chain[0]["options"] = {"minutes": 15, "history": False}
    figures, sim = replay(settings(chain=chain), "default", 1, *learned, arrives)
    # by the limits it bursts, and Slurm gives it the booting node: it waits the boot
    assert figures.launches == 1 and starts(sim)["j4"] == 600
    # the first jobs have no past to learn from: a replay never reads the future
    chain[0]["options"] = {"minutes": 15}
    early = [job(n, 0, 300, requested=7200) for n in range(2)]
    figures, _ = replay(settings(chain=chain), "default", 1, *early)
    assert figures.launches == 1


def test_shared_node_jobs_pack_onto_one_node() -> None:
    config = settings(gpus=8)
    pods = [job(n, 0, 3600, cpus=2, gpus=4) for n in range(3)]
    figures, sim = replay(config, "reactive", 1, *pods)
    assert starts(sim) == {"j0": 0, "j1": 0, "j2": 600}  # two pods share the on-prem node
    assert figures.used_node_hours == pytest.approx(0.5)  # half a node for an hour


def test_spot_reclaims_requeue_jobs_and_count_lost_work_deterministically() -> None:
    config = settings(market="spot", spot_reclaim_per_hour=2.0, seed=7)
    jobs = [job(n, n * 60, 3600) for n in range(6)]
    first, _ = replay(config, "reactive", 1, *jobs)
    again, _ = replay(config, "reactive", 1, *jobs)
    assert first == again  # the same seed, the same replay
    assert first.reclaims > 0 and first.requeues > 0 and first.lost_node_hours > 0
    assert first.completed == 6
    other, _ = replay(
        settings(market="spot", spot_reclaim_per_hour=2.0, seed=8), "reactive", 1, *jobs
    )
    assert other != first


def test_a_failing_policy_voids_its_cycles(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(
        "class Broken:\n"
        "    name = 'broken'\n"
        "    def decide(self, view):\n"
        "        raise KeyError('x')\n"
    )
    config = settings(chain=[{"name": "queue_depth"}, {"name": "broken", "path": str(broken)}])
    figures, sim = replay(config, "default", 1, job(1, 0, 600), job(2, 0, 600))
    assert figures.launches == 0 and figures.policy_errors > 0
    assert figures.last_policy_error == "policy broken: raised KeyError: 'x'"
    assert starts(sim)["j2"] == 600  # it still runs, on-prem, when j1 is done


def test_a_job_wider_than_on_prem_bursts_and_static_counts_it_as_never_run() -> None:
    jobs = (job(1, 0, 60, nodes=3), job(2, 0, 60))
    figures, _ = replay(settings(), "static", 2, *jobs)
    assert figures.unrunnable == 1 and figures.completed == 1
    for name in ("reactive", "bound", "clairvoyant", "default"):
        figures, sim = replay(settings(), name, 2, *jobs)
        assert figures.unrunnable == 0 and figures.completed == 2, name
        assert figures.cloud_jobs == 1 and starts(sim)["j1"] == 600, name  # one boot
    # wider than the cloud template too (20 nodes): it fits nowhere
    figures, _ = replay(settings(), "reactive", 2, job(1, 0, 60, nodes=21), job(2, 0, 60))
    assert figures.unrunnable == 1 and figures.completed == 1


def test_on_prem_nodes_have_the_traces_processors_per_node() -> None:
    """An SWF trace read with 4 processors per node: single-processor jobs take a quarter
    of an on-prem node (not an eighth, the cloud template's 8 CPUs), so four share it."""
    config = settings()
    jobs = [job(n, 0, 3600, cpus=1) for n in range(5)]
    quad = Trace("synthetic", "swf", jobs, [], None, procs_per_node=4)
    sim = Replay(config, quad, strategy(config, "static"), 1)
    figures = sim.run().figures()
    assert sorted(starts(sim).values()) == [0, 0, 0, 0, 3600]
    assert figures.onprem_utilisation == pytest.approx(5 * 3600 / 4 / 7200)


def test_strategy_names_are_checked_before_any_replay() -> None:
    config = settings()
    chosen = strategies(config, ["queue_depth+idle_timeout"], compare=True)
    assert [s.name for s in chosen] == [
        *("static", "reactive", "bound", "clairvoyant"),
        "queue_depth+idle_timeout",
    ]
    assert chosen[-1].chain[1].options == {"minutes": 10}  # options from the config's chain
    with_options = settings(options={"min_max": {"template": "burst", "min": 2}})
    (warm,) = strategies(with_options, ["queue_depth+min_max"], compare=False)
    assert warm.chain[1].options == {"template": "burst", "min": 2}  # from [simulate] options
    with pytest.raises(ConfigError, match="policy 'nope': not built in"):
        strategies(config, ["queue_depth+nope"], compare=False)
    with pytest.raises(UsageError, match="no \\[policy\\] chain"):
        strategies(settings(chain=[]), [], compare=False)


def test_budget_cap_and_min_max_shape_the_cloud_through_the_chain() -> None:
    capped = settings(options={"budget_cap": {"hourly": PRICE}})  # one node's price
    jobs = [job(n, 0, 3600) for n in range(3)]
    figures, sim = replay(capped, "queue_depth+idle_timeout+budget_cap", 1, *jobs)
    assert figures.launches == 1  # the second cloud node would break the cap
    assert starts(sim) == {"j0": 0, "j1": 600, "j2": 3600}  # j2 waits for on-prem
    warm = settings(options={"min_max": {"template": "burst", "min": 1}})
    figures, sim = replay(
        warm, "queue_depth+idle_timeout+min_max", 1, job(1, 0, 60), job(2, 4000, 60)
    )
    assert figures.launches == 1 and figures.cloud_jobs == 0  # kept warm, never needed
    # paid from the first cycle to an hour after the last job (then the replay ends)
    assert figures.paid_node_hours * 3600 == pytest.approx(4060 + 3600, abs=30)


def test_onprem_power_saving_powers_idle_nodes_off_and_on_for_jobs() -> None:
    power = {"onprem_suspend_after_s": 600, "onprem_boot_delay_s": 300, "onprem_idle_kw": 2.0}
    jobs = (job(1, 0, 100), job(2, 5000, 100))
    figures, sim = replay(settings(**power), "static", 2, *jobs)
    # both nodes are off when j2 comes: one is powered on and j2 waits for its boot
    assert starts(sim) == {"j1": 0, "j2": 300}
    assert figures.onprem_power_ons == 1
    # node 1 off 600-6000 s, node 0 off 700-5000 s: 9,700 s off at 2 kW
    assert figures.onprem_off_node_hours == pytest.approx(9700 / 3600)
    assert figures.energy_saved_kwh == pytest.approx(2 * 9700 / 3600)
    floor, sim = replay(settings(**power, onprem_keep_on=1), "static", 2, *jobs)
    assert starts(sim)["j2"] == 0 and floor.onprem_power_ons == 0  # one node always on


def test_a_template_without_capacity_falls_back_as_the_daemon_does() -> None:
    """The replay runs the daemon's decide step, capacity alternates included: `burst` has
    room for one instance in the simulated cloud, so of three nodes launched for three
    jobs one starts there and two on its fallback template `spare` (max_nodes 2)."""
    config = settings(capacity={"burst": 1}, fallback=2)
    busy = job(0, 0, 7200)  # on-prem is busy: the three jobs burst
    figures, sim = replay(config, "default", 1, busy, *(job(i, 10, 3600) for i in (1, 2, 3)))
    assert figures.capacity_failures == 2
    assert figures.launches == 3 and figures.completed == 4
    placed = {j.job_id: j.pool for j in sim.jobs}
    assert sorted(placed[f"j{i}"] for i in (1, 2, 3)) == ["burst", "spare", "spare"]
    assert [starts(sim)[f"j{i}"] for i in (1, 2, 3)] == [600, 600, 600]


def test_slurm_mode_slots_are_launched_from_slurms_resume_requests() -> None:
    """A slurm-mode template under a chain with no demand policy: Slurm resumes slots for
    the jobs itself, and the daemon's decide step launches what it asked for (the resume
    requests are the first demand); the jobs start once the nodes have booted."""
    config = settings(demand_mode="slurm", chain=[{"name": "idle_timeout"}])
    busy = job(0, 0, 7200)
    figures, sim = replay(config, "default", 1, busy, job(1, 10, 3600), job(2, 10, 3600))
    assert figures.launches == 2 and figures.completed == 3 and figures.requeues == 0
    assert [starts(sim)[j] for j in ("j1", "j2")] == [600, 600]
    policy_mode = settings(chain=[{"name": "idle_timeout"}])  # nothing asks: nothing bursts
    figures, _ = replay(policy_mode, "default", 1, busy, job(1, 10, 3600))
    assert figures.launches == 0 and figures.cloud_jobs == 0


def test_the_replays_kept_free_slots_are_those_the_view_lists_from_its_nodes() -> None:
    """The replay keeps each template's free slots in name order as nodes change (a capped
    pool has hundreds of powered-down slots): every cycle they are the ones ClusterView
    works out from the nodes themselves, as the daemon's view does, and nodes are launched
    and stopped along the way."""
    from dataclasses import replace

    from clustermgr.policy.view import ClusterView

    seen: list[tuple[list[str], list[str]]] = []

    class Checked(Replay):
        def _view(self, shadow: float | None) -> ClusterView:
            view = super()._view(shadow)
            plain = replace(view, burst_index=None, free_index=None)
            seen.append((view.free_slots("burst"), plain.free_slots("burst")))
            return view

    config = settings()
    jobs = [job(i, i * 900, 3600, nodes=1 + i % 3) for i in range(8)]
    sim = Checked(config, trace(*jobs), strategy(config, "default"), 1)
    figures = sim.run().figures()
    assert figures.launches > 1 and seen
    assert all(kept == listed for kept, listed in seen)
    assert min(len(kept) for kept, _ in seen) < 20 == max(len(kept) for kept, _ in seen)


def test_market_choice_runs_short_jobs_on_spot_and_long_wide_ones_on_demand() -> None:
    chain = [
        {"name": "queue_depth"},
        {"name": "market_choice", "options": {"reclaim_per_hour": 0.05}},
        {"name": "idle_timeout"},
    ]
    config = settings(spot_twin=True, spot_reclaim_per_hour=0.05, chain=chain, seed=3)
    jobs = [
        job(1, 0, 72000, requested=72000),  # holds the on-prem node
        job(3, 60, 36000, nodes=8, requested=36000),  # 8 nodes, 10 h: e^4 - 1 restarts
        # 1 node, 5 minutes: on spot (it comes once j3 runs: Slurm places a job on any free
        # node of its partitions, whatever market it was bought for)
        job(2, 1200, 300, requested=300),
    ]
    figures, sim = replay(config, "default", 1, *jobs)
    assert {j.job_id: j.pool for j in sim.jobs} == {"j1": "onprem", "j2": "cheap", "j3": "burst"}
    assert figures.completed == 3 and figures.policy_errors == 0
    # the same jobs all on the spot template: cheaper by the price, dearer by the reclaims
    only_spot = settings(market="spot", spot_reclaim_per_hour=0.05, seed=3)
    spot_all, _ = replay(only_spot, "default", 1, *jobs)
    assert spot_all.reclaims > 0 and figures.reclaims == 0

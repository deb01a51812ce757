"""The `clairvoyant` baseline: the least any online policy could pay for `reactive`'s work.

It runs `reactive`'s schedule (the same placement, the same starts, so the same waits) and
pays it as a policy that knew the future would:

- Each cloud node is kept warm or stopped by the offline optimum. Its jobs' busy spans are
  known, so the node's instance runs are the cheapest grouping of those spans: a run is
  launched one boot before its first span and stopped at the end of its last, and two spans
  share a run iff keeping the node through the gap costs less, by the template's billing
  rule, than stopping it and booting again (an exact dynamic programme per node).
- Each job's market is chosen knowing its run time, where the config has templates of the
  same shape in another market (a spot and an on-demand template), and on a spot template
  whose type has an on-demand price (bought on-demand, as `spot_fallback` does): spot iff
  its expected cost is lower. A job of `w` nodes running `r` seconds on spot, reclaimed at
  rate `l` per node, restarts from scratch at each reclaim of any of its nodes: it is paid
  `w * (e^(l*w*r) - 1) / (l*w)` node-seconds plus a boot per reclaim (`e^(l*w*r) - 1` of
  them) in expectation. The expected rework is paid and counted as lost; the schedule is
  replayed without reclaims, so a reclaim's delay is not in the waits.

`waste captured` = (reactive - strategy) / (reactive - clairvoyant), on cost: the share of
`reactive`'s avoidable bill a strategy saved (0% is reactive, 100% the floor; above 100% a
strategy bought less than reactive's schedule did, e.g. by running fewer jobs in the cloud).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from clustermgr.config import Settings
from clustermgr.core.pricing import BillingRule
from clustermgr.policy.view import TemplateView
from clustermgr.sim.model import SimJob
from clustermgr.sim.nodeview import ONPREM
from clustermgr.sim.replay import Replay, Strategy
from clustermgr.sim.results import Outcome, Sample, share
from clustermgr.sim.traces import Trace

EXPONENT_CAP = 50.0  # e^50 reclaims: spot is out of the question for such a job


@dataclass(frozen=True, slots=True)
class Market:
    """One way to buy a node of a template's shape: a template in its market."""

    template: str
    market: str
    hourly: float
    billing: BillingRule
    boot_s: float


@dataclass(frozen=True, slots=True)
class Busy:
    """A span a node must be up for (its jobs running), bought in one market."""

    start: float
    end: float
    market: Market


@dataclass(frozen=True, slots=True)
class Run:
    """One instance: launched at `launch` (a boot before its first span), stopped at `stop`."""

    launch: float
    stop: float
    market: Market
    billed_s: float

    @property
    def cost(self) -> float:
        return self.market.hourly * self.billed_s / 3600


def market_options(
    templates: Mapping[str, TemplateView], boot_s: Mapping[str, float], default_boot_s: float
) -> dict[str, list[Market]]:
    """Per template: itself first, then each template of the same shape in another market."""

    def market(view: TemplateView) -> Market:
        boot = boot_s.get(view.name, default_boot_s)
        return Market(view.name, view.market, view.hourly_price(), view.billing, boot)

    options: dict[str, list[Market]] = {}
    for name, view in templates.items():
        shape = (view.cpus, view.gpus, view.memory_mb)
        twins = [
            market(other)
            for other in templates.values()
            if other.market != view.market and (other.cpus, other.gpus, other.memory_mb) == shape
        ]
        own = market(view)
        price = view.prices.get(view.instance_types[0]) if view.instance_types else None
        if view.market == "spot" and price is not None and price.on_demand is not None:
            # a spot template's type bought on-demand, as spot_fallback relaunches it
            twins.append(replace(own, market="on-demand", hourly=price.on_demand))
        options[name] = [own, *twins]
    return options


def rework_node_s(market: Market, nodes: int, run_s: float, reclaim_per_s: float) -> float:
    """Expected node-seconds paid beyond `nodes * run_s` (lost work and re-boots) on spot."""
    if market.market != "spot" or reclaim_per_s <= 0:
        return 0.0
    rate = reclaim_per_s * nodes  # any of its nodes reclaimed kills the job
    if rate * run_s > EXPONENT_CAP:
        return math.inf
    reclaims = math.expm1(rate * run_s)
    return nodes * (reclaims / rate - run_s + reclaims * market.boot_s)


def expected_cost(market: Market, nodes: int, run_s: float, reclaim_per_s: float) -> float:
    node_s = nodes * run_s + rework_node_s(market, nodes, run_s, reclaim_per_s)
    return market.hourly * node_s / 3600


def cheapest(options: Sequence[Market], nodes: int, run_s: float, reclaim_per_s: float) -> Market:
    """The market a job costs least in, knowing its run time (ties: the first, its own)."""
    return min(options, key=lambda m: expected_cost(m, nodes, run_s, reclaim_per_s))


def merge(spans: Sequence[Busy]) -> list[Busy]:
    """One node's spans, overlapping ones merged (shared-node jobs); a merged span of two
    markets is bought in the dearer one."""
    merged: list[Busy] = []
    for span in sorted(spans, key=lambda s: s.start):
        if merged and span.start <= merged[-1].end:
            last = merged[-1]
            dearer = max(last.market, span.market, key=lambda m: m.hourly)
            merged[-1] = Busy(last.start, max(last.end, span.end), dearer)
        else:
            merged.append(span)
    return merged


def optimal_runs(spans: Sequence[Busy]) -> list[Run]:
    """The cheapest instance runs covering one node's spans (sorted, not overlapping).

    A gap of at least boot + 2 * (increment + minimum) is always cut: stopping there costs
    at most the boot and two roundings, keeping costs the gap. Between such cuts (and
    market changes) an exact O(n^2) dynamic programme groups the spans."""
    runs: list[Run] = []
    segment: list[Busy] = []
    for span in spans:
        if segment and _must_cut(segment[-1], span):
            runs += _best_grouping(segment)
            segment = []
        segment.append(span)
    if segment:
        runs += _best_grouping(segment)
    return runs


def _must_cut(before: Busy, after: Busy) -> bool:
    if before.market != after.market:
        return True
    rule = after.market.billing
    return after.start - before.end >= after.market.boot_s + 2 * (rule.increment_s + rule.minimum_s)


def _best_grouping(spans: list[Busy]) -> list[Run]:
    market = spans[0].market
    boot, rule = market.boot_s, market.billing
    best = [0.0] * (len(spans) + 1)  # best[j]: least billed seconds covering spans[:j]
    first_of = [0] * (len(spans) + 1)  # where the last run of that optimum begins
    for j in range(1, len(spans) + 1):
        end = spans[j - 1].end
        best[j] = math.inf
        for i in range(j, 0, -1):
            billed = best[i - 1] + rule.billed_seconds(end - spans[i - 1].start + boot)
            if billed < best[j]:
                best[j], first_of[j] = billed, i - 1
    runs: list[Run] = []
    j = len(spans)
    while j:
        i = first_of[j]
        length = spans[j - 1].end - spans[i].start + boot
        runs.append(
            Run(spans[i].start - boot, spans[j - 1].end, market, rule.billed_seconds(length))
        )
        j = i
    return runs[::-1]


def waste_captured(costs: Mapping[str, float]) -> dict[str, float | None]:
    """(reactive - strategy) / (reactive - clairvoyant) per strategy name; None where it
    means nothing (static bursts nothing; no reactive or clairvoyant; no waste to capture)."""
    reactive, floor = costs.get("reactive"), costs.get("clairvoyant")
    if reactive is None or floor is None or reactive - floor <= 1e-9:
        return dict.fromkeys(costs)
    return {
        name: None if name == "static" else (reactive - cost) / (reactive - floor)
        for name, cost in costs.items()
    }


class ClairvoyantReplay(Replay):
    """`reactive` replayed without reclaims, then paid by the offline optimum (see above)."""

    def __init__(
        self, settings: Settings, trace: Trace, chosen: Strategy, onprem: int, scale: float
    ):
        quiet = settings.simulate.model_copy(update={"spot_reclaim_per_hour": 0.0})
        # the base runs reactive's schedule, without reclaims; this class pays for it
        reactive = replace(chosen, kind="reactive")
        super().__init__(
            settings.model_copy(update={"simulate": quiet}), trace, reactive, onprem, scale
        )
        self.reclaim_per_s = settings.simulate.spot_reclaim_per_hour / 3600
        self.options = market_options(
            self.templates, quiet.boot_delay_s, quiet.default_boot_delay_s
        )
        self.spans: dict[str, list[Busy]] = {}
        self.rework: list[tuple[float, float, float]] = []  # (at, node-seconds, $) per spot job
        self.reactive: Outcome | None = None  # reactive's outcome, once run

    def _end(self, job: SimJob) -> None:
        pool = job.pool
        if pool is not None and pool != ONPREM and job.start is not None:
            choice = cheapest(self.options[pool], job.nodes, job.run_s, self.reclaim_per_s)
            for node in job.placed:
                self.spans.setdefault(node.name, []).append(Busy(job.start, self.now, choice))
            extra = rework_node_s(choice, job.nodes, job.run_s, self.reclaim_per_s)
            if extra:
                extra *= share(job, self._pool(pool).shape)
                self.rework.append((self.now, extra, choice.hourly * extra / 3600))
        super()._end(job)

    def _finish(self) -> None:
        super()._finish()  # reactive's nodes stopped and (reactive's way) paid: redone below
        # reactive's own outcome, kept before the bill is redone (`strategies.replays`)
        self.reactive = replace(
            self.outcome, strategy="reactive", _month_cost=dict(self.outcome._month_cost)
        )
        runs = [run for spans in self.spans.values() for run in optimal_runs(merge(spans))]
        paid = self.outcome
        paid.clear_bill()
        paid.launches = len(runs)
        for run in runs:
            paid.pay(run.billed_s, run.cost, self.origin + timedelta(seconds=run.stop))
        for at, node_s, cost in self.rework:
            paid.pay(node_s, cost, self.origin + timedelta(seconds=at))
            paid.lost_node_s += node_s
        paid.timeline = redraw(paid.timeline, runs, self.rework)


def redraw(
    timeline: Sequence[Sample], runs: Sequence[Run], rework: Sequence[tuple[float, float, float]]
) -> list[Sample]:
    """The samples with the clairvoyant's nodes up and its cost so far (a run's cost accrues
    at its price while it is up, its billing rounding lands at its stop)."""
    launches = sorted(runs, key=lambda r: r.launch)
    stops = sorted(runs, key=lambda r: r.stop)
    lumps = sorted(rework)
    closed = rate = offset = extra = 0.0
    up = started = stopped = lumped = 0
    redrawn = []
    for sample in timeline:
        at = sample.at_s
        while started < len(launches) and launches[started].launch <= at:
            run = launches[started]
            up, rate = up + 1, rate + run.market.hourly / 3600
            offset += run.market.hourly / 3600 * run.launch
            started += 1
        while stopped < len(stops) and stops[stopped].stop <= at:
            run = stops[stopped]
            up, rate = up - 1, rate - run.market.hourly / 3600
            offset -= run.market.hourly / 3600 * run.launch
            closed += run.cost
            stopped += 1
        while lumped < len(lumps) and lumps[lumped][0] <= at:
            extra += lumps[lumped][2]
            lumped += 1
        spent = closed + extra + max(0.0, rate * at - offset)
        redrawn.append(replace(sample, cloud_active=up, cost=spent))
    return redrawn

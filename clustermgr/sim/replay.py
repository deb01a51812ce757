"""The discrete-event replay: jobs arrive, the scheduler places them, the strategy scales.

Time jumps from event to event (a job arrives or ends, a node boots, is reclaimed or passes
an idle threshold); between events nothing changes, so a year of trace replays in seconds.
Strategies:

- `static`: the on-prem partition alone, no bursting.
- `reactive`: what the open-source peers do with Slurm's power saving: the scheduler treats
  powered-down cloud nodes as free, so a job that does not fit on-prem is allocated cloud
  nodes at once and starts when they have booted; a node is stopped after 10 idle minutes.
- `bound`: the lower bound on cost: `reactive`'s schedule (so its waits: a cloud job waits
  at most a boot), but only the work is paid (each job's run time times its share of its
  nodes; no boot, no idle time): paid = used.
- a policy chain: the daemon's own path. Each cycle builds a ClusterView, runs the chain
  (`PolicyRunner`), cuts the decision with `clamp` and carries out the plan; nodes join after
  their boot delay and the scheduler then places jobs on them.

Policy cycles run at every event time and, while a job waits or a cloud node idles, every
`[simulate] tick_s` seconds, so time-based policies (idle limits, waits) see time pass.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from clustermgr.config import PolicyRef, Settings
from clustermgr.nodes.states import NodeState
from clustermgr.policy.chain import PolicyRunner
from clustermgr.policy.fit import job_shape
from clustermgr.policy.loader import load_chain
from clustermgr.policy.view import ClusterView, NodeView, TemplateView, is_free_slot
from clustermgr.scaling.clamp import LaunchOrder
from clustermgr.scaling.decide import decide
from clustermgr.scaling.observe import template_views
from clustermgr.sim.model import OrderedNodes, Pool, Shape, SimJob, SimNode, occupy, release
from clustermgr.sim.nodeview import ONPREM, sim_node_view
from clustermgr.sim.results import Outcome, Sample, share
from clustermgr.sim.scheduler import Timeline, estimated_starts, release_timeline, schedule
from clustermgr.sim.traces import Trace
from clustermgr.workload.base import PendingJob, RunningJob
from clustermgr.workload.history import RunHistory

ARRIVE, END, BOOTED, RECLAIM, IDLE, TICK = range(6)
REACTIVE_IDLE_S = 600.0  # Slurm's SuspendTime in the peers' setups
QUIET_LIMIT_S = 40 * 86400.0  # only ticks left for this long: the rest never starts
DRAIN_S = 3600.0  # after the last job: time for the policies to stop what is still up
DEFAULT_ORIGIN = datetime(2000, 1, 1, tzinfo=UTC)
ESTIMATED_JOBS = 100  # waiting jobs given a start estimate per cycle (Slurm: bf_max_job_test)


@dataclass(frozen=True)
class Strategy:
    name: str
    kind: str  # static, reactive, bound, policy
    chain: tuple[PolicyRef, ...] = ()


class Replay:
    def __init__(
        self,
        settings: Settings,
        trace: Trace,
        strategy: Strategy,
        onprem_nodes: int,
        scale_time: float = 1.0,
    ):
        self.settings = settings
        self.strategy = strategy
        self.sim = settings.simulate
        self.rng = random.Random(self.sim.seed)  # noqa: S311  # a replayable model, not a secret
        self.origin = trace.origin or DEFAULT_ORIGIN
        self.templates: dict[str, TemplateView] = template_views(settings)
        self.onprem = self._onprem_pool(onprem_nodes, trace.procs_per_node)
        self.pools = [self.onprem] + (
            [] if strategy.kind == "static" else [self._cloud_pool(t) for t in self.templates]
        )
        self.runner = (
            PolicyRunner(load_chain(list(strategy.chain)), None)
            if strategy.kind == "policy"
            else None
        )
        # Slurm's start estimates (and the head's EASY shadow behind the first) are worked out
        # only for a chain that may read them: one with a policy that does not say it never
        # does (`reads_start_estimates = False`); they are most of a long queue's view
        self.estimates = self.runner is not None and any(
            getattr(policy, "reads_start_estimates", True) for policy in self.runner.policies
        )
        self.partition = ",".join(
            dict.fromkeys([ONPREM, *(t.partition for t in self.templates.values())])
        )
        self.outcome = Outcome(strategy=strategy.name, onprem_idle_kw=self.sim.onprem_idle_kw)
        # `bound`'s bill kept beside a replay of its schedule (reactive's): see strategies.py
        self.bound: Outcome | None = None
        self.queue: list[SimJob] = []
        self.events: list[tuple[float, int, int, object, int]] = []
        self._seq = 0
        self.now = 0.0
        self._views: dict[str, NodeView] = {}
        self._index: dict[tuple[NodeState, str | None], dict[str, NodeView]] = {}
        self._indexed_as: dict[str, tuple[NodeState, str | None]] = {}
        self._free: dict[str, list[str]] = {name: [] for name in self.templates}  # free_slots
        self._nodes = {n.name: n for p in self.pools for n in p.nodes}
        self._dirty = OrderedNodes(self._nodes.values())  # walked in a fixed order
        self._running: dict[int, RunningJob] = {}
        # the view's pending and running lists, rebuilt only after the queue or the running
        # jobs changed (most cycles are ticks: a long queue copied for nothing)
        self._queued_now: list[PendingJob] | None = None
        self._running_now: tuple[RunningJob, ...] | None = None
        self._next_tick = -1.0
        self._last_real = 0.0
        self._provider_active: dict[str, int] = {}
        self._active: dict[SimNode, None] = {}  # launched cloud nodes, in launch order
        self._requested: dict[int, SimJob] = {}  # jobs on slots Slurm asked to resume
        self._marked: list[SimJob] = []  # queued jobs whose reason or estimate a view set
        self._timeline: Timeline | None = None  # free node shares now and as jobs end
        self._open_rate = self._open_offset = 0.0  # $/s of the nodes up, and its offset
        self.history = RunHistory()  # the jobs finished so far: never the future's
        self.jobs = self._jobs(trace, scale_time)

    # --- setup -------------------------------------------------------------------------

    def _onprem_pool(self, count: int, procs_per_node: int | None) -> Pool:
        first = next(iter(self.templates.values()), None)
        shape = Shape(  # an SWF trace's node has its processors; else the first template's
            self.sim.onprem_cpus or procs_per_node or (first.cpus if first else 1),
            self.sim.onprem_gpus
            if self.sim.onprem_gpus is not None
            else (first.gpus if first else 0),
            self.sim.onprem_memory_mb or (first.memory_mb if first else 1),
        )
        nodes = [SimNode(f"onprem{i:05d}", ONPREM, shape, NodeState.UP) for i in range(count)]
        for node in nodes:
            node.reset()
            node.idle_since = 0.0
        saving = self.sim.onprem_suspend_after_s is not None
        return Pool(ONPREM, shape, nodes, cloud=False, resumable=saving)

    def _cloud_pool(self, name: str) -> Pool:
        template = self.templates[name]
        shape = Shape(template.cpus, template.gpus, template.memory_mb)
        names = self.settings.template(name).node_names[: template.max_nodes]
        nodes = [SimNode(n, name, shape, NodeState.POWERED_DOWN) for n in names]
        for node in nodes:
            node.reset()
        # Slurm resumes the slots itself: the peers' model, and a slurm-mode template's under
        # a policy chain (the daemon then launches what Slurm asked for, or refuses it)
        resumable = self.strategy.kind in ("reactive", "bound") or (
            self.strategy.kind == "policy" and template.demand_mode == "slurm"
        )
        return Pool(name, shape, nodes, cloud=True, resumable=resumable)

    def _jobs(self, trace: Trace, scale_time: float) -> list[SimJob]:
        jobs = []
        most = {p.name: self._room(p) if p.cloud else len(p.nodes) for p in self.pools}
        for index, job in enumerate(trace.jobs):
            sim_job = SimJob(
                index=index,
                job_id=job.job_id,
                submit=job.submit_s * scale_time,
                nodes=job.nodes,
                cpus=job.cpus,
                gpus=job.gpus,
                memory_mb=job.memory_mb,
                requested_s=job.requested_s,
                run_s=job.run_s,
                user=job.user,
                pending=None,  # type: ignore[arg-type]  # set below, once fit is known
            )
            if not any(pool.holds(sim_job, most[pool.name]) for pool in self.pools):
                self.outcome.unrunnable += 1  # fits no pool of this strategy: never runs
                continue
            sim_job.pending = self._pending(sim_job)
            jobs.append(sim_job)
        return jobs

    def _pending(self, job: SimJob) -> PendingJob:
        shape = next((p.shape for p in self.pools if p.cloud), self.onprem.shape)
        cpus, gpus, memory = job.need_on(shape)
        return PendingJob(
            job_id=job.job_id,
            partition=self.partition,
            nodes=job.nodes,
            tasks=job.nodes,
            cpus_per_node=cpus,
            memory_per_node_mb=memory,
            gpus_per_node=gpus,
            gpu_model=None,
            gpus_per_job=0,
            features=(),
            time_limit_min=math.ceil(job.requested_s / 60) if job.requested_s else None,
            submit_time=self.origin + timedelta(seconds=job.submit),
            reason="Priority",
            estimated_start=None,
            user=job.user,
        )

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> Outcome:
        for job in self.jobs:
            self._push(job.submit, ARRIVE, job, 0)
        if self.sim.onprem_suspend_after_s is not None:
            for node in self.onprem.nodes:  # idle from the start
                self._push(self.sim.onprem_suspend_after_s, IDLE, node, node.generation)
        self.outcome.jobs = len(self.jobs)
        live_until = 0.0
        while self.events:
            self.now = self.events[0][0]
            real = tick = False
            for kind, subject, generation in self._due(self.now):
                tick |= kind == TICK
                real |= kind != TICK and self._handle(kind, subject, generation)
            if not (real or tick):
                continue  # only stale timers (a node stopped since, a job requeued)
            if real:
                self._last_real = self.now
            elif self.now - self._last_real > (
                DRAIN_S if len(self.outcome.waits) == len(self.jobs) else QUIET_LIMIT_S
            ):
                break  # nodes still up (a warm floor) are stopped here
            live_until = self.now
            shadow = self._schedule()
            if self.runner is not None:
                self._cycle(shadow)
            self._sample()
            self._maybe_tick()
        if not self.events:  # ran out: the stale timers at the end changed nothing
            self.now = live_until
        self._finish()
        return self.outcome

    def _due(self, now: float) -> Iterator[tuple[int, object, int]]:
        while self.events and self.events[0][0] <= now:
            _, _, kind, subject, generation = heapq.heappop(self.events)
            yield kind, subject, generation

    def _push(self, at: float, kind: int, subject: object, generation: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, self._seq, kind, subject, generation))

    def _handle(self, kind: int, subject: object, generation: int) -> bool:
        """Apply one event; False when it is stale (its job or node has moved on)."""
        if kind == ARRIVE:
            assert isinstance(subject, SimJob)
            self.queue.append(subject)
            self._queued_now = None
            return True
        if kind == END:
            assert isinstance(subject, SimJob)
            if subject.generation == generation:
                self._end(subject)
                return True
            return False
        if not isinstance(subject, SimNode) or subject.generation != generation:
            return False
        if kind == BOOTED:
            subject.state = NodeState.UP
            self._dirty.add(subject)
        elif kind == RECLAIM and subject.state in (NodeState.BOOTING, NodeState.UP):
            self._reclaim(subject)
        elif kind == IDLE and subject.state is NodeState.UP and self._idle_enough(subject):
            if subject.pool == ONPREM:
                return self._power_off(subject)
            self._stop(subject)
        else:
            return False
        return True

    def _idle_enough(self, node: SimNode) -> bool:
        """Idle for its whole limit (an older timer of a node busy since does not count)."""
        if not node.empty or node.idle_since is None:
            return False
        limit = self.sim.onprem_suspend_after_s if node.pool == ONPREM else REACTIVE_IDLE_S
        return self.now - node.idle_since >= (limit or 0.0) - 1e-6

    def _end(self, job: SimJob) -> None:
        pool = self._pool(job.pool)
        nodes = list(job.placed)
        release(job, pool, self.now)
        self._running.pop(job.index, None)
        self._running_now = None
        self._dirty.add_all(nodes)
        job.end = self.now
        self.outcome.finish(job, pool.cloud, pool.shape)
        if job.requested_s:
            self.history.record(job.user, job_shape(job.pending), job.requested_s, job.run_s)
        if pool.cloud:
            for paid_per_job in (
                self.outcome if self.strategy.kind == "bound" else None,
                self.bound,
            ):
                if paid_per_job is not None:
                    self._pay_work(paid_per_job, job, pool, nodes)
        if pool.cloud and self.strategy.kind in ("reactive", "bound"):
            for node in nodes:
                if node.empty:
                    self._push(self.now + REACTIVE_IDLE_S, IDLE, node, node.generation)
        suspend = self.sim.onprem_suspend_after_s
        if not pool.cloud and suspend is not None:
            for node in nodes:
                if node.empty:
                    self._push(self.now + suspend, IDLE, node, node.generation)

    def _pay_work(self, paid: Outcome, job: SimJob, pool: Pool, nodes: list[SimNode]) -> None:
        """`bound`'s bill: a finished cloud job's work, nothing else."""
        paid_s = job.run_s * job.nodes * share(job, pool.shape)
        price = self.templates[pool.name].hourly_price(nodes[0].market if nodes else None)
        paid.pay(paid_s, price * paid_s / 3600, self.origin + timedelta(seconds=self.now))

    def _schedule(self) -> float | None:
        queued = len(self.queue)
        shadow = schedule(
            self.queue,
            self.pools,
            self.now,
            self.sim.backfill_depth,
            self._room,
            self._start,
            want_shadow=self.estimates,
        )
        if len(self.queue) != queued:  # jobs only leave the queue here
            self._queued_now = None
        return shadow

    def _start(self, job: SimJob, pool: Pool, nodes: list[SimNode]) -> None:
        """Give `job` its nodes (booting powered-down ones first, in the reactive model; under
        a policy chain a slurm-mode slot is REQUESTED, and the next decide step launches it
        or refuses it, as the daemon does with Slurm's resume requests)."""
        for node in nodes:
            if node.state is NodeState.POWERED_DOWN and pool.cloud and self.runner is not None:
                node.state = NodeState.REQUESTED
                pool.active[node] = None
            elif node.state is NodeState.POWERED_DOWN and pool.cloud:
                self._launch(node, self.templates[pool.name].market)
            elif node.state is NodeState.POWERED_DOWN:
                self._power_on(node)
        occupy(job, pool, nodes, self.now)
        self._dirty.add_all(nodes)
        if any(n.state is NodeState.REQUESTED for n in nodes):
            self._requested[job.index] = job  # it starts once its nodes are launched
            return
        self._begin(job, nodes)

    def _begin(self, job: SimJob, nodes: list[SimNode]) -> None:
        job.start = max([self.now, *(n.up_at or self.now for n in nodes)])
        if job.first_start is None:
            job.first_start = job.start
        job.end = None
        estimated_end = job.start + job.estimate_s
        limit = self.origin + timedelta(seconds=estimated_end)
        names, started = tuple(n.name for n in nodes), self.origin + timedelta(seconds=job.start)
        facts = (started, job.user, job_shape(job.pending), job.requested_s or None)  # history's
        self._running[job.index] = RunningJob(job.job_id, names, limit, *facts)
        self._running_now = None
        for node in nodes:
            node.jobs_end = max(node.jobs_end or 0.0, estimated_end)
        self._dirty.add_all(nodes)  # their jobs' ends changed
        self._push(job.start + job.run_s, END, job, job.generation)

    def _room(self, pool: Pool) -> int:
        """How many more nodes of `pool` its provider's instance cap allows."""
        if not pool.cloud:
            return pool.dormant_count()
        template = self.templates[pool.name]
        limit = self.settings.provider(template.provider).max_instances
        if limit is None:
            return len(pool.nodes)
        return limit - self._provider_active.get(template.provider, 0)

    # --- cloud nodes -------------------------------------------------------------------

    def _launch(self, node: SimNode, market: str) -> None:
        template = self.templates[node.pool]
        boot = self.sim.boot_delay_s.get(node.pool, self.sim.default_boot_delay_s)
        node.generation += 1
        node.state = NodeState.BOOTING
        node.launched_at = self.now
        node.up_at = self.now + boot
        node.idle_since = node.up_at
        node.market = market
        node.jobs_end = None
        self._dirty.add(node)
        self._provider_active[template.provider] = (
            self._provider_active.get(template.provider, 0) + 1
        )
        self.outcome.launches += 1
        self._active[node] = None
        self._pool(node.pool).active[node] = None
        self._accrue(node, +1)
        self._push(node.up_at, BOOTED, node, node.generation)
        rate = self.sim.spot_reclaim_per_hour
        if market == "spot" and rate > 0:
            self._push(self.now + self.rng.expovariate(rate / 3600), RECLAIM, node, node.generation)

    def _stop(self, node: SimNode) -> None:
        template = self.templates[node.pool]
        self._accrue(node, -1)
        if self.strategy.kind != "bound":  # the bound pays per job (see _end)
            run_s = self.now - (node.launched_at if node.launched_at is not None else self.now)
            cost = template.billing.cost(template.hourly_price(node.market), run_s)
            when = self.origin + timedelta(seconds=self.now)
            self.outcome.pay(template.billing.billed_seconds(run_s), cost, when)
        node.generation += 1
        node.state = NodeState.POWERED_DOWN
        node.launched_at = node.up_at = node.idle_since = node.jobs_end = None
        node.market = None
        node.reset()
        self._dirty.add(node)
        self._provider_active[template.provider] -= 1
        self._active.pop(node, None)
        self._pool(node.pool).active.pop(node, None)

    def _accrue(self, node: SimNode, sign: int) -> None:
        """Keep the running cost of the nodes still up (for the cost curve): rate*now - offset."""
        if self.strategy.kind == "bound" or node.launched_at is None:
            return
        per_s = self.templates[node.pool].hourly_price(node.market) / 3600
        self._open_rate += sign * per_s
        self._open_offset += sign * per_s * node.launched_at

    def _reclaim(self, node: SimNode) -> None:
        """Spot reclaim: the node's jobs are requeued; the work they did is lost."""
        self.outcome.reclaims += 1
        self._evict(node)
        self._stop(node)

    def _evict(self, node: SimNode) -> None:
        """Requeue the jobs on `node` (as Slurm does when their node goes away)."""
        pool = self._pool(node.pool)
        for job in [j for j in pool.running.values() if node in j.placed]:
            self._evict_job(job, pool)

    def _evict_job(self, job: SimJob, pool: Pool) -> None:
        if job.start is not None and self.now > job.start:
            job.lost_node_s += (self.now - job.start) * len(job.placed)
        self._dirty.add_all(job.placed)
        release(job, pool, self.now)
        self._running.pop(job.index, None)
        self._running_now = None
        job.generation += 1
        job.start = None
        self.outcome.requeues += 1
        self._requeue(job)

    def _requeue(self, job: SimJob) -> None:
        at = next((i for i, queued in enumerate(self.queue) if queued.index > job.index), None)
        self.queue.insert(len(self.queue) if at is None else at, job)
        self._queued_now = None

    # --- on-prem power (Slurm's power saving on the on-prem partition) ------------------

    def _power_off(self, node: SimNode) -> bool:
        """Suspend an idle on-prem node, unless that would leave fewer on than the floor."""
        if len(self.onprem.active) <= self.sim.onprem_keep_on:
            return False
        node.generation += 1
        node.state = NodeState.POWERED_DOWN
        node.launched_at = self.now  # when it went off (for the energy figure)
        node.up_at = node.idle_since = None
        self.onprem.active.pop(node, None)
        self._dirty.add(node)
        return True

    def _power_on(self, node: SimNode) -> None:
        off_since = node.launched_at if node.launched_at is not None else self.now
        self.outcome.onprem_off_node_s += self.now - off_since
        self.outcome.onprem_power_ons += 1
        node.generation += 1
        node.state = NodeState.BOOTING
        node.launched_at = None
        node.up_at = self.now + self.sim.onprem_boot_delay_s
        self.onprem.active[node] = None
        self._dirty.add(node)
        self._push(node.up_at, BOOTED, node, node.generation)

    # --- the policy cycle --------------------------------------------------------------

    def _cycle(self, shadow: float | None) -> None:
        """The daemon's decide step (scaling/decide.py) on the modelled view, and its plan
        carried out as act would: an order's nodes beyond the simulated cloud's capacity
        (`[simulate] capacity`) fail, and its alternates take them as far as they go."""
        assert self.runner is not None
        decided = decide(self.settings, self.runner, self._view(shadow))
        if decided.error:
            self.outcome.policy_errors += 1
            self.outcome.last_policy_error = decided.error
            return
        for order in decided.plan.launches:
            missing = self._launch_order(order)
            for alternate in order.alternates:
                if not missing:
                    break
                retry = replace(alternate, nodes=alternate.nodes[:missing])
                missing -= len(retry.nodes) - self._launch_order(retry)
        self._settle_requests()
        for stop in decided.plan.stops:
            node = self._nodes[stop.node]
            self._evict(node)  # the shipped policies stop idle nodes only; a custom one may not
            self._stop(node)

    def _settle_requests(self) -> None:
        """Jobs whose requested slots were all launched start when they join; a slot the
        plan did not launch is powered down again and its job requeued (the daemon fails
        it with the refusal's reason, Slurm requeues the job)."""
        for index, job in list(self._requested.items()):
            nodes = list(job.placed)
            if any(n.state is NodeState.REQUESTED for n in nodes):
                pool = self._pool(job.pool)
                for node in nodes:
                    if node.state is NodeState.REQUESTED:
                        node.state = NodeState.POWERED_DOWN
                        pool.active.pop(node, None)
                        self._dirty.add(node)
                self._evict_job(job, pool)
            else:
                self._begin(job, nodes)
            del self._requested[index]

    def _launch_order(self, order: LaunchOrder) -> int:
        """Launch what the template's capacity allows; returns how many found none."""
        pool = self._pool(order.template)
        limit = self.sim.capacity.get(order.template)
        up = sum(1 for n in pool.active if n.state is not NodeState.REQUESTED)
        room = len(order.nodes) if limit is None else limit - up
        started = order.nodes[: max(room, 0)]
        for name in started:
            self._launch(self._nodes[name], order.market)
        failed = len(order.nodes) - len(started)
        self.outcome.capacity_failures += failed
        return failed

    def _view(self, shadow: float | None) -> ClusterView:
        if self.estimates and (self._dirty or self._timeline is None):  # jobs moved with nodes
            self._timeline = release_timeline(self.pools, self.now)
        for node in self._dirty:
            template = self.templates.get(node.pool)
            view = self._views[node.name] = sim_node_view(
                node, node.pool != ONPREM, template, self.origin
            )
            if view.kind == "cloud":
                old = self._indexed_as.get(node.name)
                if old is not None:
                    del self._index[old][node.name]
                key = self._indexed_as[node.name] = (view.state, view.template)
                self._index.setdefault(key, {})[node.name] = view
                self._index_free(view)
        self._dirty.clear()
        now = self.origin + timedelta(seconds=self.now)
        # every queued job reads "Priority" with no start estimate but the head ("Resources")
        # and the first ESTIMATED_JOBS: only the jobs marked last cycle need resetting
        for job in self._marked:
            job.pending.reason = "Priority"
            job.pending.estimated_start = None
        self._marked = self.queue[:ESTIMATED_JOBS]
        if self.queue:
            self.queue[0].pending.reason = "Resources"
        if self.estimates:
            self._estimate_starts(shadow)
        if self._queued_now is None:
            self._queued_now = [job.pending for job in self.queue]
        if self._running_now is None:
            self._running_now = tuple(self._running.values())
        return ClusterView(
            now=now,
            templates=self.templates,
            nodes=self._views,
            pending=self._queued_now,
            running=self._running_now,
            month_spend=self.outcome.month_spend(now),
            burst_index=self._index,
            free_index=self._free,
            run_history=self.history,
        )

    def _estimate_starts(self, shadow: float | None) -> None:
        assert self._timeline is not None
        starts = estimated_starts(self.queue, self.pools, self.now, ESTIMATED_JOBS, self._timeline)
        if starts and shadow is not None:
            starts[0] = shadow  # the head's EASY reservation is the better estimate
        for job, start in zip(self.queue, starts, strict=False):
            if math.isfinite(start):
                job.pending.estimated_start = self.origin + timedelta(seconds=start)

    def _index_free(self, view: NodeView) -> None:
        """Keep the template's free slots (`ClusterView.free_slots`) in name order."""
        template = self.templates.get(view.template or "")
        if template is None:
            return
        names = self._free.setdefault(template.name, [])
        at = bisect.bisect_left(names, view.name)
        listed = at < len(names) and names[at] == view.name
        if is_free_slot(view, template.onprem):
            if not listed:
                names.insert(at, view.name)
        elif listed:
            del names[at]

    # --- bookkeeping ----------------------------------------------------------------------

    def _pool(self, name: str | None) -> Pool:
        return next(p for p in self.pools if p.name == name)

    def _sample(self) -> None:
        spent = self.outcome.cost + max(0.0, self._open_rate * self.now - self._open_offset)
        sample = Sample(self.now, self.onprem.busy, len(self._active), len(self.queue), spent)
        self.outcome.timeline.append(sample)
        if self.bound is not None:  # its bill so far is all it has spent (no node accrues)
            self.bound.timeline.append(replace(sample, cost=self.bound.cost + 0.0))

    def _maybe_tick(self) -> None:
        if self.runner is None or self._next_tick > self.now:
            return
        idle_cloud = any(n.state is NodeState.UP and n.empty for n in self._active)
        if self.queue or idle_cloud:
            self._next_tick = self.now + self.sim.tick_s
            self._push(self._next_tick, TICK, None, 0)

    def _finish(self) -> None:
        for node in list(self._active):
            self._stop(node)
        for node in self.onprem.nodes:
            if node.state is NodeState.POWERED_DOWN and node.launched_at is not None:
                self.outcome.onprem_off_node_s += self.now - node.launched_at
        self.outcome.never_started = len(self.queue)
        self.outcome.end_s = self.now  # the last moment anything happened
        self.outcome.onprem_nodes = len(self.onprem.nodes)

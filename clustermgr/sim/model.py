"""The simulated cluster: nodes with free CPUs/GPUs/memory, grouped in pools, and jobs.

A pool is the on-prem partition or one cloud template. Every node of a pool has the same
shape, so a whole-node job (an SWF job: cpus == 0) needs the pool's full shape on each node,
and a shared-node job (a GPU pod) needs its own CPUs/GPUs/memory.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice

from clustermgr.nodes.states import NodeState
from clustermgr.workload.base import PendingJob, RunningJob

Need = tuple[int, int, int]  # cpus, gpus, memory_mb on one node
USABLE = (NodeState.UP, NodeState.BOOTING)


@dataclass(frozen=True)
class Shape:
    cpus: int
    gpus: int
    memory_mb: int


@dataclass(eq=False, slots=True)
class SimNode:
    name: str
    pool: str  # "onprem" or a template name
    shape: Shape
    state: NodeState
    free_cpus: int = 0
    free_gpus: int = 0
    free_mem: int = 0
    jobs: int = 0
    launched_at: float | None = None
    up_at: float | None = None
    idle_since: float | None = None
    market: str | None = None
    jobs_end: float | None = None  # latest time-limit end of its jobs (budget_cap reads it)
    generation: int = 0  # bumped at each launch and stop: stale timer events are ignored

    def reset(self) -> None:
        self.free_cpus, self.free_gpus, self.free_mem = (
            self.shape.cpus,
            self.shape.gpus,
            self.shape.memory_mb,
        )
        self.jobs = 0

    def fits(self, need: Need) -> bool:
        return self.free_cpus >= need[0] and self.free_gpus >= need[1] and self.free_mem >= need[2]

    @property
    def empty(self) -> bool:
        return self.jobs == 0


class OrderedNodes(dict[SimNode, None]):
    """A set of nodes walked in the order they were first added. A set of SimNodes (hashed
    by address) walks them in an order that moves with whatever the process allocated
    before, and the order the replay walks changed nodes in reaches the policies (which
    idle node is stopped first), so the figures did too."""

    def __init__(self, nodes: Iterable[SimNode] = ()):
        super().__init__(dict.fromkeys(nodes))

    def add(self, node: SimNode) -> None:
        self[node] = None

    def add_all(self, nodes: Iterable[SimNode]) -> None:
        for node in nodes:
            self[node] = None


@dataclass(eq=False, slots=True)
class SimJob:
    index: int  # submit order: the queue's priority
    job_id: str
    submit: float
    nodes: int
    cpus: int  # 0 = whole node
    gpus: int
    memory_mb: int
    requested_s: float | None
    run_s: float
    user: str
    pending: PendingJob
    start: float | None = None  # when it began running (after its nodes booted)
    first_start: float | None = None
    end: float | None = None
    allocated_at: float | None = None
    placed: list[SimNode] = field(default_factory=list)
    need: Need = (0, 0, 0)
    pool: str | None = None
    lost_node_s: float = 0.0  # work lost to spot reclaims (paid, not used)
    running: RunningJob | None = None
    generation: int = 0  # bumped when requeued: its old END event is ignored
    shares_on: Shape | None = None  # the node shape `shares` was worked out for
    shares: float = 0.0  # nodes x its share of one node of that shape (scheduler.node_shares)
    placement: int = 0  # its pool's count of placements when it was placed (EndOrder)
    end_key: tuple[float, int] = (0.0, 0)  # its place in the pool's EndOrder

    @property
    def estimate_s(self) -> float:
        """What the scheduler believes the job takes: its time limit, else its run time."""
        return self.requested_s if self.requested_s else self.run_s

    def need_on(self, shape: Shape) -> Need:
        if self.cpus == 0:
            return (shape.cpus, shape.gpus, shape.memory_mb)
        return (self.cpus, self.gpus, self.memory_mb)

    def fits_shape(self, shape: Shape) -> bool:
        need = self.need_on(shape)
        return need[0] <= shape.cpus and need[1] <= shape.gpus and need[2] <= shape.memory_mb


class EndOrder:
    """A pool's running jobs by estimated end (EASY's reservation walks them), kept as jobs
    are placed and leave instead of sorted again after each: a placed job joins the order
    once it has begun (its end is known then); ties keep the order jobs were placed in, as
    a stable sort of the pool's running jobs does."""

    def __init__(self) -> None:
        self.keys: list[tuple[float, int]] = []  # (estimated end, placement number)
        self.jobs: list[SimJob] = []  # in the order of `keys`
        self.new: dict[SimJob, None] = {}  # placed since, not in the order yet
        self.placements = 0

    def placed(self, job: SimJob) -> None:
        self.placements += 1
        job.placement = self.placements
        self.new[job] = None

    def left(self, job: SimJob) -> None:
        if job in self.new:  # it never joined the order
            del self.new[job]
            return
        at = bisect_left(self.keys, job.end_key)
        del self.keys[at], self.jobs[at]

    def ordered(self, running: dict[int, SimJob], now: float) -> list[SimJob]:
        if self.new:
            if not all(job.start for job in self.new):  # one's start waits: it ends from now
                return sorted(running.values(), key=lambda j: (j.start or now) + j.estimate_s)
            for job in self.new:
                job.end_key = ((job.start or now) + job.estimate_s, job.placement)
                at = bisect_left(self.keys, job.end_key)
                self.keys.insert(at, job.end_key)
                self.jobs.insert(at, job)
            self.new.clear()
        return self.jobs


class Pool:
    """Nodes of one shape. Up nodes take jobs; so do booting ones (Slurm allocates nodes
    that are powering up: the job starts when they join); `resumable` ones (powered-down
    cloud slots, in the reactive model) take jobs and boot for them."""

    def __init__(
        self,
        name: str,
        shape: Shape,
        nodes: Iterable[SimNode],
        cloud: bool,
        resumable: bool = False,
    ):
        self.name = name
        self.shape = shape
        self.cloud = cloud
        self.resumable = resumable  # Slurm resumes its powered-down nodes for a job
        self.nodes = list(nodes)
        self.running: dict[int, SimJob] = {}  # job index -> job placed here
        self.busy = 0  # nodes running at least one job
        self.ends = EndOrder()  # the running jobs by estimated end (`by_end`)
        # nodes that exist now (all on-prem ones; launched cloud ones), in launch order:
        # a cycle looks at these, never at every powered-down slot
        self.active: dict[SimNode, None] = dict.fromkeys(self.nodes if not cloud else ())

    def usable(self, resumable: bool) -> Iterable[SimNode]:
        """Nodes a job may take now: up or booting, then (`resumable`) powered-down ones."""
        now = [node for node in self.active if node.state in USABLE]  # a list: walked at C speed
        return chain(now, self.dormant()) if resumable else now

    def holds(self, job: SimJob, most: int) -> bool:
        """`job` fits this pool's shape and `most` of its nodes (the most it may have)."""
        return job.nodes <= min(len(self.nodes), most) and job.fits_shape(self.shape)

    def dormant(self) -> Iterator[SimNode]:
        return (node for node in self.nodes if node not in self.active)

    def dormant_count(self) -> int:
        return len(self.nodes) - len(self.active)

    def pick(
        self, job: SimJob, resumable: bool, avoid: set[SimNode] | frozenset[SimNode] = frozenset()
    ) -> list[SimNode] | None:
        """Nodes for `job` now, or None: up nodes before booting ones before powered-down
        ones, and for shared-node jobs used nodes before empty ones (they pack)."""
        need = job.need_on(self.shape)
        whole = job.cpus == 0
        wanted = job.nodes
        tiers: tuple[list[SimNode], ...] = ([], [], [])
        for node in self.usable(False):
            if (whole and node.jobs) or node in avoid or not node.fits(need):
                continue
            if node.state is NodeState.UP:
                tier = tiers[0] if node.jobs else tiers[1]
                tier.append(node)
                if len(tier) == wanted and (tier is tiers[0] or whole):
                    return tier  # enough of the best kind: no need to look further
            else:
                tiers[2].append(node)
        chosen = [node for tier in tiers for node in tier]
        if len(chosen) < wanted and resumable:
            for node in self.dormant():  # every one is empty and of the pool's shape
                if node not in avoid:
                    chosen.append(node)
                    if len(chosen) == wanted:
                        break
        return chosen[:wanted] if len(chosen) >= wanted else None

    def reservation(self, job: SimJob, now: float, resumable: bool) -> tuple[float, set[SimNode]]:
        """EASY's shadow: the earliest time `job` fits here by the running jobs' estimated
        ends, and the nodes it would take then (inf when it never fits)."""
        need = job.need_on(self.shape)
        whole = job.cpus == 0

        def fits(free: tuple[int, int, int, int]) -> bool:
            cpus, gpus, memory, jobs = free
            return (
                cpus >= need[0] and gpus >= need[1] and memory >= need[2] and not (whole and jobs)
            )

        free = {n: (n.free_cpus, n.free_gpus, n.free_mem, n.jobs) for n in self.usable(False)}
        dormant = self.dormant_count() if resumable else 0
        if len(free) + dormant < job.nodes:
            return float("inf"), set()
        fitting = {n for n, left in free.items() if fits(left)}
        if len(fitting) + dormant >= job.nodes:
            spare = list(islice(self.dormant(), max(0, job.nodes - len(fitting))))
            return now, set(sorted(fitting, key=lambda n: n.name)[: job.nodes]) | set(spare)
        for finished in self.by_end(now):
            for node in finished.placed:
                if node in free:
                    cpus, gpus, memory, jobs = free[node]
                    free[node] = left = (
                        cpus + finished.need[0],
                        gpus + finished.need[1],
                        memory + finished.need[2],
                        jobs - 1,
                    )
                    if fits(left):
                        fitting.add(node)
            if len(fitting) >= job.nodes:
                at = max(now, (finished.start or now) + finished.estimate_s)
                return at, set(sorted(fitting, key=lambda n: n.name)[: job.nodes])
        return float("inf"), set()

    def by_end(self, now: float) -> list[SimJob]:
        """The running jobs by estimated end, ties in the order they were placed (a job not
        begun yet counts from `now`)."""
        return self.ends.ordered(self.running, now)

    def empty_usable(self, resumable: bool) -> int:
        if not self.cloud:  # on-prem nodes on are all up or booting: count, do not look
            empty = len(self.active) - self.busy
        else:
            empty = sum(1 for n in self.usable(False) if n.empty)
        return empty + (self.dormant_count() if resumable else 0)


def occupy(job: SimJob, pool: Pool, nodes: list[SimNode], now: float) -> None:
    job.need = job.need_on(pool.shape)
    job.placed = nodes
    job.pool = pool.name
    job.allocated_at = now
    for node in nodes:
        node.free_cpus -= job.need[0]
        node.free_gpus -= job.need[1]
        node.free_mem -= job.need[2]
        if node.jobs == 0:
            pool.busy += 1
        node.jobs += 1
        node.idle_since = None
    pool.running[job.index] = job
    pool.ends.placed(job)


def release(job: SimJob, pool: Pool, now: float) -> None:
    for node in job.placed:
        node.free_cpus += job.need[0]
        node.free_gpus += job.need[1]
        node.free_mem += job.need[2]
        node.jobs -= 1
        if node.jobs == 0:
            node.idle_since = now
            pool.busy -= 1
    if pool.running.pop(job.index, None) is not None:
        pool.ends.left(job)
    job.placed = []

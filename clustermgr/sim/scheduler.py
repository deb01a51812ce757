"""The scheduler model: FCFS with EASY backfilling, as Slurm's backfill behaves for a queue
ordered by submit time.

1. Start jobs in queue order while the first one fits (pools in order: on-prem first, then
   the cloud templates, as Slurm's node weights prefer them).
2. The first job that does not fit gets a reservation: the earliest time its nodes are free
   by the running jobs' estimated ends (their time limits; the run time when the trace has
   none), and the nodes it would take then (the "shadow").
3. Later jobs (up to `depth` of them, Slurm's bf_max_job_test) start now if they fit and
   either end before the shadow time or leave the reserved nodes alone.

Jobs never span pools: a Slurm job runs inside one partition's nodes of one template.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

from clustermgr.sim.model import Need, Pool, Shape, SimJob, SimNode
from clustermgr.sim.results import share

Start = Callable[[SimJob, Pool, list[SimNode]], None]
FREE_CPUS, FREE_GPUS, FREE_MEM = (
    attrgetter("free_cpus"),
    attrgetter("free_gpus"),
    attrgetter("free_mem"),
)
Room = Callable[[Pool], int]


def schedule(
    queue: list[SimJob],
    pools: list[Pool],
    now: float,
    depth: int,
    room: Room,
    start: Start,
    want_shadow: bool = False,
) -> float | None:
    """Start what can start now (through `start`, which occupies the nodes); return the
    head job's shadow time (None: nothing left waiting).

    A `resumable` pool's powered-down nodes count as free (Slurm's power saving resumes
    them for the job); `room` says how many more nodes a pool may resume (its provider's
    instance cap)."""
    taken: set[int] = set()
    head_index = 0
    while head_index < len(queue):
        job = queue[head_index]
        if not place(job, pools, frozenset(), room, start):
            break
        taken.add(job.index)
        head_index += 1
    shadow: float | None = None
    if head_index < len(queue):
        shadow = backfill(queue, head_index, pools, now, depth, room, start, taken)
        if shadow is None and want_shadow:
            shadow, _, _ = earliest(queue[head_index], pools, now)
    if taken:
        queue[:] = [job for job in queue if job.index not in taken]
    return shadow


def backfill(
    queue: list[SimJob],
    head_index: int,
    pools: list[Pool],
    now: float,
    depth: int,
    room: Room,
    start: Start,
    taken: set[int],
) -> float | None:
    """EASY: start later jobs that do not delay the head's reservation. Returns the shadow
    time, or None when nothing could backfill (then no reservation was worked out)."""
    # empty nodes a job could take now: powered-down ones only as far as the instance cap
    # leaves room (a capped cloud pool has hundreds that no job may resume)
    empty = {pool.name: empty_now(pool, room) for pool in pools}
    candidates = queue[head_index + 1 : head_index + 1 + depth]
    if not candidates:
        return None
    shared = any(job.cpus for job in candidates)
    if not (any(empty.values()) or (shared and has_shared_room(pools))):
        return None
    shadow, reserved_pool, reserved = earliest(queue[head_index], pools, now)

    def unreserved(pool: Pool) -> int:
        # counted without the cap: the reservation may hold powered-down nodes too
        everything = pool.empty_usable(pool.resumable)
        if pool is not reserved_pool:
            return everything
        return everything - sum(1 for node in reserved if node.empty)

    spare = {pool.name: unreserved(pool) for pool in pools}
    avoid_reserved = frozenset(reserved)
    # the largest free room on any one node of each pool (and away from the reservation):
    # a shared-node job bigger than that cannot start, whatever the node; worked out when
    # a shared-node job first asks, again after a start
    holes: dict[tuple[str, bool], Need] = {}

    def largest_hole(pool: Pool, ends_in_time: bool) -> Need:
        key = (pool.name, ends_in_time)
        if key not in holes:
            holes[key] = hole(pool, frozenset() if ends_in_time else avoid_reserved, room)
        return holes[key]

    # Whether a job can start depends only on its shape and on whether it ends before the
    # shadow, and nothing frees up during a backfill pass: a shape that found no nodes
    # finds none again until the next start changes the nodes (a queue is mostly repeats)
    no_room: set[tuple[int, int, int, int, bool]] = set()
    for job in candidates:
        ends_in_time = now + job.estimate_s <= shadow
        tried = (job.nodes, job.cpus, job.gpus, job.memory_mb, ends_in_time)
        if tried in no_room:
            continue
        no_room.add(tried)
        if job.cpus == 0:  # whole nodes: the counts say at once whether it can start
            room_for = empty if ends_in_time else spare
            if not any(job.nodes <= count for count in room_for.values()):
                continue
        else:
            need = job.need_on
            if not any(fits_in(need(p.shape), largest_hole(p, ends_in_time)) for p in pools):
                continue
        avoid = frozenset() if ends_in_time else avoid_reserved
        for pool in pools:
            nodes = pick_in(job, pool, avoid if pool is reserved_pool else frozenset(), room)
            if nodes is not None:
                start(job, pool, nodes)
                taken.add(job.index)
                no_room.clear()
                empty[pool.name] = empty_now(pool, room)
                spare[pool.name] = unreserved(pool)
                holes.clear()
                break
    return shadow


def empty_now(pool: Pool, room: Room) -> int:
    """Empty nodes a job may take now: up or booting ones, and powered-down ones (in a
    resumable pool) as far as `room` allows."""
    if not pool.resumable:
        return pool.empty_usable(False)
    dormant = pool.dormant_count()
    return pool.empty_usable(False) + (min(dormant, max(room(pool), 0)) if dormant else 0)


def hole(pool: Pool, avoid: frozenset[SimNode], room: Room) -> Need:
    """The most CPUs, GPUs and memory free on any one usable node (each on its own); a
    powered-down node counts while the pool may resume one."""
    if pool.resumable and pool.dormant_count() and room(pool) > 0:
        return (pool.shape.cpus, pool.shape.gpus, pool.shape.memory_mb)
    nodes = [node for node in pool.usable(False) if node not in avoid] if avoid else None
    if nodes is None:
        nodes = list(pool.usable(False))
    return (
        max(0, max(map(FREE_CPUS, nodes), default=0)),
        max(0, max(map(FREE_GPUS, nodes), default=0)),
        max(0, max(map(FREE_MEM, nodes), default=0)),
    )


def fits_in(need: Need, room: Need) -> bool:
    return need[0] <= room[0] and need[1] <= room[1] and need[2] <= room[2]


def has_shared_room(pools: list[Pool]) -> bool:
    """A used node with CPUs left (a shared-node job might still fit there)."""
    return any(node.jobs and node.free_cpus for pool in pools for node in pool.usable(False))


def place(
    job: SimJob,
    pools: list[Pool],
    avoid: frozenset[SimNode],
    room: Room,
    start: Start,
) -> bool:
    for pool in pools:
        nodes = pick_in(job, pool, avoid, room)
        if nodes is not None:
            start(job, pool, nodes)
            return True
    return False


def pick_in(
    job: SimJob,
    pool: Pool,
    avoid: frozenset[SimNode],
    room: Room,
) -> list[SimNode] | None:
    if job.nodes > len(pool.nodes) or not job.fits_shape(pool.shape):
        return None
    can_resume = pool.resumable and room(pool) > 0
    nodes = pool.pick(job, can_resume, avoid)
    if nodes is None or not can_resume:
        return nodes
    # each powered-down node it takes is one more instance: the cap counts them all
    dormant = sum(1 for n in nodes if n.launched_at is None)
    return nodes if dormant <= room(pool) else None


def earliest(job: SimJob, pools: list[Pool], now: float) -> tuple[float, Pool | None, set[SimNode]]:
    best: tuple[float, Pool | None, set[SimNode]] = (float("inf"), None, set())
    for pool in pools:
        if job.nodes > len(pool.nodes) or not job.fits_shape(pool.shape):
            continue
        at, nodes = pool.reservation(job, now, pool.resumable)
        if at < best[0]:
            best = (at, pool, nodes)
    return best


Timeline = tuple[float, list[tuple[float, float]]]  # node shares free now; (when, shares)


def release_timeline(pools: list[Pool], now: float) -> Timeline:
    """The node shares free now and, by the running jobs' estimated ends, when more free up
    (in order): what `estimated_starts` reads. It changes only when a node does."""
    free = 0.0
    releases: list[tuple[float, float]] = []
    for pool in pools:
        free += pool.empty_usable(False)  # empty nodes: whole ones free
        used = dict.fromkeys(node for job in pool.running.values() for node in job.placed)
        free += sum(node_room(node) for node in used)
        for job in pool.running.values():
            begins = job.start if job.start is not None else now
            releases.append((begins + job.estimate_s, node_shares(job, pool.shape)))
    releases.sort()
    return free, releases


def estimated_starts(
    queue: list[SimJob], pools: list[Pool], now: float, count: int, timeline: Timeline
) -> list[float]:
    """When the first `count` waiting jobs should start on the nodes there are (Slurm's
    backfill estimate, which onprem_first reads): in queue order, each once the running
    jobs' estimated ends (`timeline`) have freed room for it and every job before it.
    Counted in node shares, without backfill holes, so the estimates are late rather than
    early."""
    if not queue or count <= 0:
        return []
    free, releases = timeline
    starts: list[float] = []
    demand, position, at = 0.0, 0, now
    shape = pools[0].shape
    for job in queue[:count]:
        demand += node_shares(job, shape)
        while free < demand - 1e-9 and position < len(releases):
            at = max(at, releases[position][0])
            free += releases[position][1]
            position += 1
        starts.append(at if free >= demand - 1e-9 else float("inf"))
    return starts


def node_room(node: SimNode) -> float:
    """The share of a node still free (its scarcest resource)."""
    if not node.jobs:
        return 1.0
    shape = node.shape
    parts = [node.free_cpus / shape.cpus, node.free_mem / shape.memory_mb]
    if shape.gpus:
        parts.append(node.free_gpus / shape.gpus)
    return max(0.0, min(parts))


def node_shares(job: SimJob, shape: Shape) -> float:
    """The node shares `job` takes on nodes of `shape` (asked for every running job and the
    first queued ones each cycle: kept on the job while the shape stays the same)."""
    if job.shares_on is not shape:
        job.shares_on, job.shares = shape, job.nodes * share(job, shape)
    return job.shares

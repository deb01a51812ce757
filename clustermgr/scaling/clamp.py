"""clamp(decision) -> Plan: the policies' wishes cut to what may and can happen.

Limits applied, in order: a template that may not launch now (protected mode, or its
region's director is not READY: refused with that reason), the Slurm node slots that exist
and are powered down, the template's max_nodes, the provider's max_instances. Every cut is
noted in the plan.

Capacity fallbacks are decided here too, not in act: once every launch is cut, each order
gets its alternates, the free slots of its template's `fallback_templates` (and theirs, in
order) that no other order took, cut to the same limits with the room the launches left.
Act launches an alternate only for nodes the cloud had no capacity for, so a fallback never
passes a limit; what the alternates cannot cover carries the cut (`LaunchOrder.cut`) as its
reason. The budget is judged before: `budget_cap` prices a launch at the dearest of its
alternates (`ClusterView.launch_price`).

All or nothing: a launch whose nodes serve one job (`Launch.together`) on a template whose
`scaling_strategy` is all-or-nothing becomes one order launched together or not at all
(`LaunchOrder.all_or_nothing`): a limit that would cut it drops it whole (noted), and only
an alternate with room for every node of it is kept, so a fallback gets the whole job.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field, replace

from clustermgr.config import Settings
from clustermgr.db.ownership import LaunchIdentity
from clustermgr.nodes.states import NodeState
from clustermgr.policy.decision import Launch, Refusal, ScaleDecision
from clustermgr.policy.view import ClusterView

LAUNCHABLE = (NodeState.POWERED_DOWN, NodeState.REQUESTED)
STOPPABLE = (NodeState.UP, NodeState.DRAINING)


@dataclass(frozen=True)
class LaunchOrder:
    template: str
    nodes: tuple[str, ...]
    market: str
    request_id: str
    reason: str
    jobs: tuple[str, ...] = ()
    # launched in order, as far as they go, for nodes the cloud had no capacity for
    alternates: tuple[LaunchOrder, ...] = ()
    cut: str = ""  # why the alternates cover fewer nodes than the order, if they do
    # the nodes start together or none does: a short answer is released at once, whole
    all_or_nothing: bool = False
    # a relaunch of a request an earlier process issued (a crash, a takeover): the cloud
    # adopts what carries the request's tag before it creates anything (act.relaunch)
    resume: bool = False
    # what the database stored with the request when it was issued: the spec takes its
    # placement and client token from it, not from today's configuration
    stored: LaunchIdentity | None = None


@dataclass(frozen=True)
class StopOrder:
    node: str
    reason: str


@dataclass(frozen=True)
class JobFate:
    """What the plan does for a group of pending jobs, and why."""

    status: str  # served, waiting, refused, unfit, held, other (no template's partition)
    reason: str
    jobs: tuple[str, ...]
    tasks: int  # the jobs' tasks: a pending array of 50 counts 50


@dataclass
class Plan:
    launches: list[LaunchOrder] = field(default_factory=list)
    stops: list[StopOrder] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    jobs: list[JobFate] = field(default_factory=list)  # every pending job, accounted

    @property
    def empty(self) -> bool:
        return not (self.launches or self.stops)


def new_request_id() -> str:
    return f"r-{uuid.uuid4().hex[:16]}"


def clamp(decision: ScaleDecision, view: ClusterView, settings: Settings) -> Plan:
    plan = Plan(refusals=list(decision.refusals), notes=list(decision.notes))
    provider_active = Counter(
        view.templates[n.template].provider
        for n in view.active_nodes()
        if n.template is not None and n.template in view.templates
    )
    provider_limit = {p.name: p.max_instances for p in settings.providers}
    taken: set[str] = set()
    for launch in decision.launches:
        if launch.count <= 0 and not launch.nodes:
            continue
        template = view.templates[launch.template]
        if template.blocked:  # protected mode, or waiting for the region's director
            plan.refusals.append(Refusal(template.name, template.blocked, launch.jobs))
            continue
        nodes = _pick_nodes(launch, view, taken)
        wanted = len(launch.nodes) if launch.nodes else launch.count
        whole = launch.together and template.all_or_nothing and wanted > 1
        if len(nodes) < launch.count and not launch.nodes:
            plan.notes.append(
                f"clamp: {launch.template}: only {len(nodes)} of {launch.count} wanted nodes "
                "have a powered-down slot"
            )
        held = len(view.active_nodes(template.name)) + _planned(plan, template.name)
        room, limited_by = (
            template.max_nodes - held,
            (f"max_nodes = {template.max_nodes} ({held} active or planned)"),
        )
        limit = provider_limit.get(template.provider)
        if limit is not None and limit - provider_active[template.provider] < room:
            room = limit - provider_active[template.provider]
            limited_by = (
                f"provider {template.provider}'s max_instances = {limit} "
                f"({provider_active[template.provider]} active or planned)"
            )
        if whole and min(len(nodes), room) < wanted:
            jobs = f"jobs {','.join(launch.jobs)}" if launch.jobs else "a job"
            plan.notes.append(
                f"clamp: {launch.template}: all-or-nothing: {jobs} need {wanted} nodes, "
                f"{max(0, min(len(nodes), room))} may launch ({limited_by} or free slots): "
                "none launched"
            )
            continue
        if len(nodes) > room:
            plan.notes.append(
                f"clamp: {launch.template}: {len(nodes) - max(room, 0)} of {len(nodes)} launches "
                f"cut by {limited_by}"
            )
            nodes = nodes[: max(room, 0)]
        if not nodes:
            continue
        taken.update(nodes)
        provider_active[template.provider] += len(nodes)
        plan.launches.append(
            LaunchOrder(
                template=launch.template,
                nodes=tuple(nodes),
                market=launch.market or template.market,
                request_id=new_request_id(),
                reason=launch.reason,
                jobs=launch.jobs,
                all_or_nothing=whole,
            )
        )
    left = {
        p: limit - provider_active[p] for p, limit in provider_limit.items() if limit is not None
    }
    reserved: Counter[str] = Counter()  # alternate slots per template
    plan.launches = [_with_alternates(o, plan, view, taken, left, reserved) for o in plan.launches]
    for stop in decision.stops:
        node = view.nodes[stop.node]
        if node.state in STOPPABLE and stop.node not in taken:
            plan.stops.append(StopOrder(stop.node, stop.reason))
            taken.add(stop.node)
    return plan


def fallback_chain(view: ClusterView, template: str) -> list[str]:
    """The fallback templates of `template`, and theirs, depth first, each once."""
    chain: list[str] = []
    todo = list(reversed(view.templates[template].fallbacks))
    while todo:
        name = todo.pop()
        if name == template or name in chain or name not in view.templates:
            continue
        chain.append(name)
        todo.extend(reversed(view.templates[name].fallbacks))
    return chain


def _with_alternates(
    order: LaunchOrder,
    plan: Plan,
    view: ClusterView,
    taken: set[str],
    room: dict[str, int],
    reserved: Counter[str],
) -> LaunchOrder:
    """The order with its alternates: per fallback template up to as many free slots as the
    order has nodes, within the template's max_nodes and its provider's max_instances (an
    alternate of the order's own provider replaces failed nodes one for one, so it needs no
    room of its own there)."""
    chain = fallback_chain(view, order.template)
    if not chain:
        return order
    alternates: list[LaunchOrder] = []
    cuts: list[str] = []
    own = view.templates[order.template].provider
    wanted = len(order.nodes)
    for name in chain:
        template = view.templates[name]
        if template.blocked:  # protected, backing off, or waiting for its director
            cuts.append(f"{name}: {template.blocked}")
            continue
        free = [n for n in view.free_slots(name) if n not in taken]
        limit = min(
            len(free),
            template.max_nodes
            - len(view.active_nodes(name))
            - _planned(plan, name)
            - reserved[name],
            wanted,
        )
        why = "free slots or max_nodes"
        if template.provider != own and template.provider in room:
            if room[template.provider] < limit:
                why = f"max_instances of provider {template.provider}"
            limit = min(limit, room[template.provider])
        nodes = free[: max(limit, 0)]
        if len(nodes) < wanted:
            cuts.append(f"{name}: {len(nodes)} of {wanted} nodes ({why})")
        if not nodes or (order.all_or_nothing and len(nodes) < wanted):
            continue  # a job launched all or nothing goes to a fallback whole or not at all
        taken.update(nodes)
        reserved[name] += len(nodes)
        if template.provider != own and template.provider in room:
            room[template.provider] -= len(nodes)
        alternates.append(
            LaunchOrder(
                name,
                tuple(nodes),
                order.market,
                new_request_id(),
                f"fallback from {order.template}: no capacity",
                order.jobs,
                all_or_nothing=order.all_or_nothing,
            )
        )
    covered = sum(len(a.nodes) for a in alternates)
    cut = ""
    if covered < wanted:
        cut = f"fallback covers {covered} of {wanted} nodes ({'; '.join(cuts)})"
    return replace(order, alternates=tuple(alternates), cut=cut)


def _planned(plan: Plan, template: str) -> int:
    return sum(len(order.nodes) for order in plan.launches if order.template == template)


def _pick_nodes(launch: Launch, view: ClusterView, taken: set[str]) -> list[str]:
    if launch.nodes:
        return [n for n in launch.nodes if n not in taken and view.nodes[n].state in LAUNCHABLE]
    free = view.free_slots(launch.template)  # hundreds in a capped pool, taken mostly none
    return (free if not taken else [n for n in free if n not in taken])[: launch.count]

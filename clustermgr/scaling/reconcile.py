"""Every cycle: the database vs the clouds (tag-filtered) vs Slurm, and the hook requests.

- Slurm's answer moves BOOTING nodes to UP (slurmd registered) and keeps idle_since.
- Hook requests: resume marks nodes REQUESTED, suspend stops them, resume-fail fails them.
- Instances tagged as ours that no node holds are adopted when a LAUNCHING node of the
  same request waits for them, else terminated after the orphan grace period.
- Nodes whose instance vanished (spot reclaim, manual delete) are failed with the reason,
  so Slurm requeues their jobs; nodes stuck in BOOTING past the boot timeout likewise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select

from clustermgr.db.models import ClusterEvent, Node
from clustermgr.lifecycle import NodeState, transition
from clustermgr.providers.base import TAG_NODE, CloudInstance, InstanceState
from clustermgr.scaling.act import Actor, bind_instance
from clustermgr.scaling.clamp import StopOrder
from clustermgr.workload.base import WorkloadNode
from clustermgr.workload.hooks import HookRequest

log = logging.getLogger(__name__)
BOUND_STATES = (NodeState.BOOTING, NodeState.UP, NodeState.DRAINING, NodeState.STOPPING)
GONE = (InstanceState.TERMINATED, InstanceState.ERROR)


@dataclass
class ReconcileReport:
    resume_requests: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node -> jobs
    registered: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    orphans_terminated: list[str] = field(default_factory=list)
    stopped_by_slurm: list[str] = field(default_factory=list)
    unhealthy: list[str] = field(default_factory=list)
    relaunch: dict[str, list[str]] = field(default_factory=dict)  # request id -> nodes


def apply_hook_requests(actor: Actor, requests: Sequence[HookRequest]) -> ReconcileReport:
    report = ReconcileReport()
    if not requests:
        return report
    now = actor.clock()
    suspend: dict[str, str] = {}
    failed: dict[str, str] = {}
    with actor.db.session() as session:
        for request in requests:
            session.add(
                ClusterEvent(
                    at=now, kind="hook", source=f"slurm {request.kind}", message=_describe(request)
                )
            )
            jobs_of = {
                n: tuple(j for j, ns in request.jobs.items() if n in ns) for n in request.nodes
            }
            nodes = {
                n.name: n for n in session.scalars(select(Node).where(Node.name.in_(request.nodes)))
            }
            for name in request.nodes:
                node = nodes.get(name)
                if node is None:
                    continue
                state = NodeState(node.state)
                if request.kind == "resume" and state is NodeState.POWERED_DOWN:
                    reason = "Slurm resume request" + (
                        f" for jobs {','.join(jobs_of[name])}" if jobs_of[name] else ""
                    )
                    transition(node, NodeState.REQUESTED, reason, actor.actor, now=now)
                if request.kind == "resume" and state in (
                    NodeState.POWERED_DOWN,
                    NodeState.REQUESTED,
                ):
                    report.resume_requests[name] = jobs_of[name]
                elif request.kind == "suspend" and state in (
                    NodeState.UP,
                    NodeState.DRAINING,
                    NodeState.BOOTING,
                ):
                    suspend[name] = "Slurm powered it down (SuspendProgram)"
                elif request.kind == "resume-fail" and state not in (
                    NodeState.POWERED_DOWN,
                    NodeState.RETIRED,
                ):
                    failed[name] = "(Code:RESUME_TIMEOUT) Slurm gave up waiting for the node"
    if suspend:
        actor.stop([StopOrder(n, r) for n, r in sorted(suspend.items())])
        report.stopped_by_slurm = sorted(suspend)
    actor.fail(failed)
    return report


def _describe(request: HookRequest) -> str:
    from clustermgr.hostlists import compress

    jobs = f" for jobs {','.join(sorted(request.jobs))}" if request.jobs else ""
    return f"{request.kind} {compress(request.nodes)}{jobs}"


HEALTH_CODE = "(Code:HEALTH)"


def replace_unhealthy(actor: Actor, slurm_nodes: Mapping[str, WorkloadNode]) -> list[str]:
    """Burst nodes the health check flagged: a boot failure (already powered down, job
    requeued) is failed and terminated now; a periodic one drains, then stops when idle."""
    now = actor.clock()
    failed: dict[str, str] = {}
    idle_drained: list[StopOrder] = []
    with actor.db.session() as session:
        for node in session.scalars(
            select(Node).where(
                Node.kind == "cloud",
                Node.state.in_(
                    [s.value for s in (NodeState.BOOTING, NodeState.UP, NodeState.DRAINING)]
                ),
            )
        ):
            seen = slurm_nodes.get(node.name)
            if seen is None or not seen.reason.startswith(HEALTH_CODE):
                continue
            if seen.powered_down or "POWERING_DOWN" in seen.flags or not seen.drained:
                failed[node.name] = seen.reason
            elif node.state != NodeState.DRAINING.value:
                transition(node, NodeState.DRAINING, seen.reason, actor.actor, now=now)
            elif seen.state == "IDLE":
                idle_drained.append(StopOrder(node.name, seen.reason))
    actor.fail(failed)
    actor.stop(idle_drained)
    return sorted(failed) + [s.node for s in idle_drained]


def observe_slurm(actor: Actor, slurm_nodes: Mapping[str, WorkloadNode]) -> list[str]:
    """Copy Slurm's view onto the nodes; BOOTING -> UP once slurmd registered."""
    now = actor.clock()
    registered = []
    with actor.db.session() as session:
        for node in session.scalars(select(Node).where(Node.state != NodeState.RETIRED.value)):
            seen = slurm_nodes.get(node.name)
            if seen is None:
                continue
            slurm_state = "+".join([seen.state, *sorted(seen.flags)])
            if node.slurm_state != slurm_state:
                node.slurm_state = slurm_state
            idle = seen.state == "IDLE" and not seen.powered_down and not seen.powering_up
            if idle and node.idle_since is None:
                node.idle_since = now
            elif not idle and node.idle_since is not None:
                node.idle_since = None
            if (
                node.state == NodeState.BOOTING.value
                and seen.responding
                and not seen.powering_up
                and not seen.powered_down
                and seen.state != "DOWN"
            ):
                transition(node, NodeState.UP, "slurmd registered", actor.actor, now=now)
                registered.append(node.name)
    return registered


def reconcile_cloud(
    actor: Actor,
    instances: Mapping[str, Mapping[str, CloudInstance]],
    orphan_grace_s: float,
    report: ReconcileReport,
) -> None:
    """Compare each provider whose listing succeeded (`instances`) with the database."""
    now = actor.clock()
    vanished: dict[str, str] = {}
    timed_out: dict[str, str] = {}
    finish_stopping: list[tuple[str, str | None]] = []
    adopted: list[tuple[str, str]] = []  # (template, node)
    with actor.db.session() as session:
        nodes = list(session.scalars(select(Node).where(Node.kind == "cloud")))
        bound = {n.instance_id for n in nodes if n.instance_id}
        launching: dict[str, list[Node]] = {}
        for node in nodes:
            listing = instances.get(node.provider or "")
            if listing is None:
                continue  # that provider could not be listed: judge nothing
            state = NodeState(node.state)
            if node.instance_id and state in BOUND_STATES:
                instance = listing.get(node.instance_id)
                if instance is None or instance.state in GONE:
                    if state is NodeState.STOPPING:
                        finish_stopping.append((node.name, None))
                    else:
                        vanished[node.name] = (
                            f"(Code:VANISHED) instance {node.instance_id} is gone "
                            "(spot reclaim or deleted outside clustermgr)"
                        )
                    continue
                if state is NodeState.BOOTING and _boot_expired(actor, node, now):
                    template = actor.settings.template(node.template or "")
                    timed_out[node.name] = (
                        f"(Code:BOOT_TIMEOUT) slurmd did not register within "
                        f"{template.boot_timeout_s:.0f} s"
                    )
                if state is NodeState.STOPPING:
                    finish_stopping.append((node.name, node.instance_id))
            elif state is NodeState.LAUNCHING and node.request_id:
                launching.setdefault(node.request_id, []).append(node)
        for request_id, group in sorted(launching.items()):
            # all or nothing: a request whose instances are not all tagged yet (killed while
            # binding) is re-issued whole, so its idempotency token sees the same request
            listing = instances.get(group[0].provider or "", {})
            matches = [_waiting_instance(listing, node, bound) for node in group]
            if any(match is None for match in matches):
                report.relaunch[request_id] = sorted(node.name for node in group)
                continue
            for node, match in zip(group, matches, strict=True):
                assert match is not None
                price = actor.price_of(node.template or "", match)
                bind_instance(session, node, match, node.template or "", now, actor.actor, price)
                bound.add(match.instance_id)
                adopted.append((node.template or "", node.name))
        inflight: set[str | None] = set(report.relaunch)
        orphans = _orphans(instances, bound, inflight, now, orphan_grace_s)
    report.adopted = [n for _, n in adopted]
    report.vanished = sorted(vanished)
    report.timed_out = sorted(timed_out)
    for template_name in sorted({t for t, _ in adopted}):
        from clustermgr.scaling.clamp import LaunchOrder

        names = tuple(n for t, n in adopted if t == template_name)
        order = LaunchOrder(template_name, names, "on-demand", "adopted", "adopted after restart")
        actor.tell_slurm_launched(order, names)
    actor.fail({**vanished, **timed_out})
    if finish_stopping:
        actor.finish_stopping(
            [n for n, _ in finish_stopping],
            [(actor_provider(actor, n), i) for n, i in finish_stopping if i],
        )
    for provider_name, ids in orphans.items():
        provider = actor.providers.get(provider_name)
        if provider is not None and ids:
            try:
                provider.terminate(ids, "orphan-sweep")
                report.orphans_terminated.extend(ids)
            except Exception as exc:  # logged; the next cycle tries again
                log.warning("orphan terminate on %s failed: %s", provider_name, exc)
    if report.orphans_terminated:
        with actor.db.session() as session:
            session.add(
                ClusterEvent(
                    at=now,
                    kind="orphan",
                    source="reconcile",
                    message="terminated " + ",".join(report.orphans_terminated),
                )
            )


def actor_provider(actor: Actor, node_name: str) -> str | None:
    with actor.db.session() as session:
        node = session.scalars(select(Node).where(Node.name == node_name)).first()
        return node.provider if node else None


def _boot_expired(actor: Actor, node: Node, now: datetime) -> bool:
    template = actor.settings.template(node.template or "")
    started = node.launched_at or node.state_since
    return (now - started).total_seconds() > template.boot_timeout_s


def _waiting_instance(
    listing: Mapping[str, CloudInstance], node: Node, bound: set[str]
) -> CloudInstance | None:
    for instance in listing.values():
        if (
            instance.instance_id not in bound
            and instance.request_id == node.request_id
            and instance.tags.get(TAG_NODE) == node.name
            and instance.state not in GONE
        ):
            return instance
    return None


def _orphans(
    instances: Mapping[str, Mapping[str, CloudInstance]],
    bound: set[str],
    inflight: set[str | None],
    now: datetime,
    grace_s: float,
) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for provider, listing in instances.items():
        for instance in listing.values():
            if instance.instance_id in bound or instance.state is InstanceState.TERMINATED:
                continue  # (an unbound instance in ERROR is junk that may still cost money)
            if instance.request_id in inflight:
                continue  # its launch is being retried with the same request id
            age = (now - instance.launch_time).total_seconds() if instance.launch_time else 0
            if age >= grace_s:
                found.setdefault(provider, []).append(instance.instance_id)
    return found

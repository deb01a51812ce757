"""The act phase: carry out the judgment (verdicts) and then the plan, from the snapshot the
cycle already has. The only module that asks the actor to change anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from sqlalchemy import select

from clustermgr.core.hostlists import compress
from clustermgr.core.reasons import (
    HOLD_PREFIX,
    HOLD_REASON,
    IMAGE,
    PROTECTED,
    REFUSED,
    Reason,
    is_hold,
    kind_of,
)
from clustermgr.db.models import ClusterEvent, Node
from clustermgr.db.ownership import IssuedLaunch
from clustermgr.nodes.states import NodeState, transition
from clustermgr.policy.view import ClusterView
from clustermgr.providers.base import ALL_OR_NOTHING
from clustermgr.scaling.accounting import as_launched
from clustermgr.scaling.actor import Actor, LaunchOutcome
from clustermgr.scaling.clamp import LaunchOrder, Plan, StopOrder
from clustermgr.scaling.comments import comment_updates
from clustermgr.scaling.observe import Snapshot
from clustermgr.scaling.ownership import FOREIGN_VERDICT
from clustermgr.scaling.reconcile import Judgment
from clustermgr.scaling.verdicts import FAILING, Judged, SlurmSeen, Verdict
from clustermgr.workload.base import WorkloadNode
from clustermgr.workload.hooks import HookRequest, consume

log = logging.getLogger(__name__)
PROTECTED_HOLD = f"{HOLD_PREFIX}(Code:{PROTECTED})"
HOLD_REASON_MAX = 240  # Slurm keeps the whole reason; sinfo and admins do not need more
RELAUNCH_REASON = "retrying an interrupted launch"
SLURM_HAS_IT_DOWN = frozenset({SlurmSeen.POWERED_DOWN, SlurmSeen.POWERING_DOWN, SlurmSeen.MISSING})


@dataclass
class ActReport:
    launched: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    registered: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    told: list[str] = field(default_factory=list)
    orphans_terminated: list[str] = field(default_factory=list)
    commented: int = 0  # pending jobs whose comment now carries a new verdict
    powered_off: list[str] = field(default_factory=list)  # on-prem, on while Slurm had them off
    error: str | None = None


def act_on_judgment(actor: Actor, snapshot: Snapshot, judgment: Judgment, out: ActReport) -> None:
    """Verdicts first: what Slurm and the clouds already did is recorded before new work."""
    retired = actor.retire({j.node: j.reason for j in judgment.having(Verdict.RETIRE)})
    record_facts(actor, snapshot, judgment, frozenset(retired))
    failing = judgment.having(*FAILING)
    reasons = {j.node: j.reason for j in failing}
    actor.fail(reasons, tell_slurm=_slurm_not_down(failing))
    out.failed.update(reasons)
    finish_fail = judgment.having(Verdict.FINISH_FAIL)
    actor.fail({j.node: j.reason for j in finish_fail}, tell_slurm=_slurm_not_down(finish_fail))
    stops = judgment.having(Verdict.STOP)
    actor.stop([StopOrder(j.node, j.reason) for j in stops])
    out.stopped.extend(j.node for j in stops)
    # our drain of a stale image's node: lifted once it is powered down, so the slot serves
    # again (a new instance boots the current revision)
    actor.release([j.node for j in stops if kind_of(j.reason) == IMAGE])
    unowned = judgment.having(Verdict.POWER_DOWN)
    actor.put_down({j.node: hold_reason(_stored_reason(snapshot, j, "")) for j in unowned})
    finish_stop = judgment.having(Verdict.FINISH_STOP)
    stored = {j.node: _stored_reason(snapshot, j) for j in finish_stop}
    actor.finish_stopping(stored, tell_slurm=_slurm_not_down(finish_stop))
    adopt = judgment.having(Verdict.ADOPT)
    for template in sorted({snapshot.nodes[j.node].template or "" for j in adopt}):
        group = {
            j.node: j.instance
            for j in adopt
            if snapshot.nodes[j.node].template == template and j.instance is not None
        }
        actor.bind(template, group)
        out.adopted.extend(sorted(group))
    tell = sorted(out.adopted + judgment.names(Verdict.TELL_SLURM))
    modes = {t.name: t.demand_mode for t in actor.templates.values()}
    asleep = [
        n
        for n in tell
        if modes.get(snapshot.nodes[n].template or "") == "policy" and _powered_down(snapshot, n)
    ]
    held = [n for n in tell if _held(snapshot, n)]  # bound now: the hold can go
    actor.tell_slurm(tell, power_up=asleep, release=held)
    out.told = tell
    out.orphans_terminated = actor.terminate_orphans(judgment.orphans)
    if out.orphans_terminated:
        record(actor, "orphan", "terminated " + ",".join(out.orphans_terminated))
    deleted = actor.delete_placement_groups(judgment.spent_groups)
    if deleted:
        record(actor, "placement", "deleted placement groups no launch needs: " + ",".join(deleted))
    listed = set(snapshot.instances) - actor.onprem
    new, gone = actor.note_foreign(judgment.foreign, listed)
    for found in new:
        log.warning("foreign instance %s: %s", found.describe(), FOREIGN_VERDICT)
    for name in gone:
        log.info("foreign instance %s is no longer listed as foreign", name)
    actor.set_down(judgment.faults)
    for node, fault in sorted(judgment.faults.items()):
        record(actor, "fault", f"{node} set DOWN in Slurm: {fault}")
    out.powered_off = actor.power_off(judgment.strays, "stray")
    if out.powered_off:
        why = "on at the BMC while Slurm has them powered down"
        record(actor, "power", f"powered off {','.join(out.powered_off)}: {why}")


def record_facts(
    actor: Actor, snapshot: Snapshot, judgment: Judgment, retired: frozenset[str] = frozenset()
) -> None:
    """Slurm's view onto the rows, and the verdicts that are only a state change, in one
    transaction: REGISTER (BOOTING -> UP), RESUME (REQUESTED), DRAIN (DRAINING), and RETIRE
    (DRAINING) of the `retired` nodes, which Slurm drained."""
    now = actor.clock()
    changes = {j.node: j for j in judgment.having(Verdict.REGISTER, Verdict.RESUME, Verdict.DRAIN)}
    changes |= {j.node: j for j in judgment.having(Verdict.RETIRE) if j.node in retired}
    names = sorted(set(judgment.facts) | set(changes))
    with actor.db.session() as session:
        for request in judgment.requests:
            session.add(
                ClusterEvent(
                    at=now, kind="hook", source=f"slurm {request.kind}", message=describe(request)
                )
            )
        if not names:
            return
        for node in session.scalars(select(Node).where(Node.name.in_(names))):
            facts = judgment.facts.get(node.name)
            if facts is not None:
                node.slurm_state = facts.slurm_state
                node.idle_since = facts.idle_since
                node.image_revision, node.kernel = facts.image_revision, facts.kernel
            judged = changes.get(node.name)
            if judged is None or node.state != judged.state.value:
                continue  # changed by someone else since the snapshot: judged again next cycle
            if judged.verdict is Verdict.REGISTER:
                transition(node, NodeState.UP, "slurmd registered", actor.actor, now=now)
            elif judged.verdict in (Verdict.DRAIN, Verdict.RETIRE):
                transition(node, NodeState.DRAINING, judged.reason, actor.actor, now=now)
            elif node.state == NodeState.POWERED_DOWN.value:
                jobs = judgment.resume_requests.get(node.name, ())
                reason = "Slurm resume request" + (f" for jobs {','.join(jobs)}" if jobs else "")
                transition(node, NodeState.REQUESTED, reason, actor.actor, now=now)


def relaunch(
    actor: Actor,
    view: ClusterView,
    judgment: Judgment,
    out: ActReport,
    guard: Callable[[], bool],
) -> None:
    """Interrupted launches (a crash, a takeover), each re-issued as the database stored it
    when it was issued: same request id, nodes in their order, jobs, market, all or nothing,
    placement and client token. The cloud adopts what carries the request's tag first and
    creates only what is missing (`LaunchSpec.resume`), so no cloud starts a second set."""
    for request_id, names in sorted(judgment.relaunch.items()):
        issued = actor.issued_launch(request_id)
        order = relaunch_order(view, request_id, names, issued)
        broken = broken_whole(order, issued)
        if broken:
            actor.fail({n: broken for n in order.nodes}, terminate=False)
            out.failed.update({n: broken for n in order.nodes})
            continue
        launch(actor, view, order, out, guard, begin=False)


def relaunch_order(
    view: ClusterView, request_id: str, names: list[str], issued: IssuedLaunch | None
) -> LaunchOrder:
    """The order of an interrupted request, rebuilt from what the database stored with it
    (`names`: its nodes still LAUNCHING). A request issued before the identity was stored
    is rebuilt from its nodes, as before (one launch of the nodes, not all or nothing)."""
    identity = issued.identity if issued is not None else None
    if issued is None or identity is None:
        node = view.nodes[names[0]]
        template, market = node.template or "", node.market or "on-demand"
        return LaunchOrder(
            template, tuple(sorted(names)), market, request_id, RELAUNCH_REASON, resume=True
        )
    launching = set(names)
    nodes = [n for n in identity.nodes if n in launching]
    nodes += sorted(launching - set(identity.nodes))
    return LaunchOrder(
        issued.template,
        tuple(nodes),
        identity.market,
        request_id,
        RELAUNCH_REASON,
        jobs=identity.jobs,
        all_or_nothing=identity.all_or_nothing,
        resume=True,
        stored=identity,
    )


def broken_whole(order: LaunchOrder, issued: IssuedLaunch | None) -> str:
    """Why an all-or-nothing request cannot be relaunched whole ("" when it can): some of
    its nodes are no longer launching (failed or stopped since), so its job cannot have
    its whole set from it; the rest fails, and the job is decided again next cycle."""
    if not order.all_or_nothing or issued is None or issued.identity is None:
        return ""
    wanted = len(issued.identity.nodes)
    if len(order.nodes) >= wanted:
        return ""
    why = f"all-or-nothing: only {len(order.nodes)} of {wanted} nodes of {order.request_id} "
    return str(Reason("OTHER", f"{ALL_OR_NOTHING}: {why}still launching, none relaunched"))


def act_on_plan(
    actor: Actor,
    view: ClusterView,
    plan: Plan,
    out: ActReport,
    guard: Callable[[], bool],
) -> None:
    refuse(actor, view, plan, out)
    for order in plan.launches:
        launch(actor, view, order, out, guard, begin=True)
    out.stopped.extend(s.node for s in actor.stop_idle(plan.stops))
    hold_policy_nodes(actor, view, plan)
    for refusal in plan.refusals:
        record(actor, "refusal", f"{refusal.template}: {refusal.reason}")
    fates = as_launched(plan, set(out.launched), out.failed)
    out.commented = actor.comment(comment_updates(view, fates))  # what users see, last


def launch(
    actor: Actor,
    view: ClusterView,
    order: LaunchOrder,
    out: ActReport,
    guard: Callable[[], bool],
    begin: bool,
) -> None:
    """Launch the order; nodes the cloud had no capacity for are replaced from the order's
    alternates (decided and cut to every limit by clamp), in their order, as far as they go;
    the rest fail with why no alternate took them."""
    outcome = (
        launch_one(actor, view, order, out)
        if _may_launch(actor, order, out, guard, begin)
        else None
    )
    if outcome is None:
        return
    missing = len(outcome.failed) if outcome.out_of_capacity else 0
    alternates = list(order.alternates)
    covered = sum(len(a.nodes) for a in alternates)
    if missing > covered and order.cut:
        for node in sorted(outcome.failed)[covered:]:
            out.failed[node] = outcome.failed[node] = f"{outcome.failed[node]}; {order.cut}"
        record(actor, "refusal", f"{order.template}: {order.cut}")
    actor.fail(outcome.failed)
    while missing and alternates:
        retry = replace(alternates.pop(0), jobs=order.jobs)
        retry = replace(retry, nodes=retry.nodes[:missing])
        if not _may_launch(actor, retry, out, guard, begin=True):
            return
        tried = launch_one(actor, view, retry, out)
        actor.fail(tried.failed)
        missing -= len(retry.nodes) - (len(tried.failed) if tried.out_of_capacity else 0)


def _may_launch(
    actor: Actor, order: LaunchOrder, out: ActReport, guard: Callable[[], bool], begin: bool
) -> bool:
    """Still the leader: the launch's intent recorded (`begin`), else False and said."""
    if not guard():
        out.error = "lost leadership during the cycle; remaining launches skipped"
        return False
    if begin:
        actor.begin_launch(order)
    return True


def launch_one(
    actor: Actor, view: ClusterView, order: LaunchOrder, out: ActReport
) -> LaunchOutcome:
    """One launch call, its nodes woken and held around it. The failed nodes are in the
    outcome (and the report), not failed yet."""
    wake = to_power_up(view, list(order.nodes))
    unheld = to_hold(view, wake)
    actor.hold(unheld)  # Slurm places no job on a node whose launch may still fail
    actor.wake(wake)  # Slurm first: see Actor.wake
    outcome = actor.launch(order)
    held = unheld + [n for n in order.nodes if _held_in_view(view, n)]
    actor.tell_slurm(outcome.launched, release=held)  # the hold goes once bound
    out.launched.extend(outcome.launched)
    out.failed.update(outcome.failed)
    return outcome


def to_power_up(view: ClusterView, names: list[str]) -> list[str]:
    """Nodes about to be launched that Slurm is not already bringing up: a policy-mode
    template's (held until now), and in slurm mode the ones Slurm did not ask for (a
    capacity fallback's)."""
    wake = []
    for name in names:
        node = view.nodes.get(name)
        known = node is not None and (node.template or "") in view.templates
        slurm_asked = node is not None and node.slurm is not None and node.slurm.power_up_asked
        if known and not slurm_asked:
            wake.append(name)
    return wake


def to_hold(view: ClusterView, wake: list[str]) -> list[str]:
    """Policy-mode nodes about to be woken that Slurm does not hold yet (a slot freed since
    the last cycle's hold): held first, so Slurm places no job on them before the launch
    succeeded."""
    return [
        name
        for name in wake
        if (node := view.nodes.get(name)) is not None
        and node.template in view.templates
        and view.templates[node.template or ""].demand_mode == "policy"
        and node.slurm is not None
        and not node.slurm.drained
    ]


def refuse(actor: Actor, view: ClusterView, plan: Plan, out: ActReport) -> None:
    """Requested nodes the plan does not launch: power them down with the reason, so the
    jobs requeue and wait visibly instead of looping through failed resumes."""
    planned = {n for order in plan.launches for n in order.nodes}
    reasons = {r.template: r.reason for r in plan.refusals}
    refused = {}
    for node in view.nodes.values():
        if node.state is NodeState.REQUESTED and node.name not in planned:
            why = reasons.get(node.template or "", "no policy launched it")
            refused[node.name] = why if Reason.parse(why) else str(Reason(REFUSED, why))
    if refused:
        actor.fail(refused, terminate=False)
        out.failed.update(refused)
    for template, reason in reasons.items():
        if view.templates[template].demand_mode == "slurm":
            actor.hold(view.free_slots(template), f"{HOLD_PREFIX}{reason}")
    release_holds(actor, view, set(reasons))


def release_holds(actor: Actor, view: ClusterView, refused: set[str]) -> None:
    """Slurm-mode slots held (drained) for a refusal that no longer stands: give them back
    to Slurm, or its jobs would pend on drained nodes for good."""
    held = [
        node.name
        for node in view.burst_nodes(NodeState.POWERED_DOWN)
        if node.template is not None
        and node.template in view.templates
        and node.template not in refused
        and view.templates[node.template].demand_mode == "slurm"
        and node.slurm is not None
        and node.slurm.drained
        and node.slurm.reason.startswith(HOLD_PREFIX)
    ]
    actor.release(held)


def hold_policy_nodes(actor: Actor, view: ClusterView, plan: Plan) -> None:
    """Powered-down policy-mode nodes no launch takes stay held (drained); a protected
    template's are held with its `(Code:PROTECTED) …`, so Slurm shows why."""
    launching = {n for order in plan.launches for n in order.nodes}
    by_reason: dict[str, list[str]] = {}
    for node in view.burst_nodes(NodeState.POWERED_DOWN):
        if (
            node.template is not None
            and node.template in view.templates
            and view.templates[node.template].demand_mode == "policy"
            and node.slurm is not None
            and not node.settling
            and node.name not in launching
            and not (view.templates[node.template].onprem and node.slurm.state == "DOWN")
        ):  # an on-prem node DOWN for a BMC fault is out already, its reason in sight
            reason = wanted_hold(node.slurm, view.templates[node.template].protected)
            if reason is not None:
                by_reason.setdefault(reason, []).append(node.name)
    for reason, names in sorted(by_reason.items()):
        actor.hold(names, reason)


def wanted_hold(slurm: WorkloadNode, protected: str | None) -> str | None:
    """The hold a powered-down policy-mode node should carry, None when it has it already
    (or an admin's drain, which is never replaced)."""
    if slurm.drained and not is_hold(slurm.reason):
        return None
    if protected:
        base = f"{HOLD_PREFIX}{protected}"
        if slurm.drained and slurm.reason.startswith(base[:HOLD_REASON_MAX]):
            return None  # held with it already (and the failure that led to it)
        last = last_failure(slurm.reason)
        wanted = (f"{base}; last: {last}" if last else base)[:HOLD_REASON_MAX]
    elif slurm.drained:  # held already: only a protection that ended is replaced
        wanted = HOLD_REASON if PROTECTED_HOLD in slurm.reason else slurm.reason
    else:
        wanted = hold_reason(slurm.reason)
    return None if slurm.drained and slurm.reason == wanted else wanted


def last_failure(reason: str) -> str | None:
    """The `(Code:KIND) detail` of a launch or boot failure a node's reason carries (as the
    failure left it, or after `; last: ` in a hold), so a protection's hold keeps it visible
    in Slurm; None for none (a refusal or a protection is not the failure)."""
    start = reason.find("(Code:")
    found = Reason.parse(reason[start:]) if start >= 0 else None
    if found is None or found.kind in (PROTECTED, REFUSED):
        return None
    return reason[start:]


def hold_reason(last: str) -> str:
    """The hold, keeping a failure's `(Code:KIND) detail` visible in Slurm (a launch that
    failed for quota would otherwise show only 'held' a second later)."""
    if Reason.parse(last) is None:
        return HOLD_REASON
    return f"{HOLD_REASON}; last: {last}"[:HOLD_REASON_MAX]


def finish(judgment: Judgment) -> None:
    """The hook requests this cycle judged are done with."""
    consume(judgment.requests)


def record(actor: Actor, kind: str, message: str) -> None:
    with actor.db.session() as session:
        session.add(ClusterEvent(at=actor.clock(), kind=kind, source=actor.actor, message=message))


def describe(request: HookRequest) -> str:
    jobs = f" for jobs {','.join(sorted(request.jobs))}" if request.jobs else ""
    return f"{request.kind} {compress(request.nodes)}{jobs}"


def _slurm_not_down(judged: list[Judged]) -> list[str]:
    return [j.node for j in judged if j.slurm not in SLURM_HAS_IT_DOWN]


def _held(snapshot: Snapshot, name: str) -> bool:
    seen = snapshot.workload.nodes.get(name)
    return seen is not None and seen.held


def _held_in_view(view: ClusterView, name: str) -> bool:
    node = view.nodes.get(name)
    return node is not None and node.slurm is not None and node.slurm.held


def _powered_down(snapshot: Snapshot, name: str) -> bool:
    seen = snapshot.workload.nodes.get(name)
    return seen is not None and seen.powered_down and not seen.power_up_asked


def _stored_reason(snapshot: Snapshot, judged: Judged, default: str = "stopping") -> str:
    return snapshot.nodes[judged.node].state_reason or default

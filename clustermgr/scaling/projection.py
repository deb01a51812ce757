"""The ClusterView policies see: the snapshot with this cycle's verdicts applied as data.

Policies decide before act writes anything, so the view shows each node as it will be once
the verdicts are carried out (a registered node is UP, a failed one powered down but not
yet free), and the plan and the verdicts never disagree about a node.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from clustermgr.config import Settings
from clustermgr.core.reasons import kind_of
from clustermgr.nodes.states import NodeState
from clustermgr.policy.view import ClusterView, NodeView
from clustermgr.scaling.observe import NodeRecord, Snapshot, template_views
from clustermgr.scaling.onprem import power_facts
from clustermgr.scaling.protection import with_this_cycle
from clustermgr.scaling.reconcile import Judgment
from clustermgr.scaling.verdicts import FAILING, FINISHING, Judged, Verdict
from clustermgr.workload.base import WorkloadNode

PROJECTED = {
    Verdict.RESUME: NodeState.REQUESTED,
    Verdict.ADOPT: NodeState.BOOTING,
    Verdict.REGISTER: NodeState.UP,
    Verdict.DRAIN: NodeState.DRAINING,
    Verdict.RETIRE: NodeState.DRAINING,
}
SETTLING = FAILING | FINISHING | {Verdict.STOP, Verdict.POWER_DOWN}


def build_view(settings: Settings, snapshot: Snapshot, judgment: Judgment) -> ClusterView:
    jobs_end: dict[str, datetime] = {}
    for job in snapshot.workload.running:
        for node in job.nodes:
            if job.end_time and (node not in jobs_end or job.end_time > jobs_end[node]):
                jobs_end[node] = job.end_time
    nodes = {}
    power = power_facts(settings, snapshot.instances)
    seen, facts = snapshot.workload.nodes, judgment.facts
    for name, record in snapshot.nodes.items():
        if record.state is NodeState.RETIRED:
            continue  # not a slot any more: policies never see it
        fact = facts.get(name)
        view = node_view(
            record,
            seen.get(name),
            jobs_end.get(name),
            fact.idle_since if fact else record.idle_since,
            # a BMC that did not answer, or a provider that could not be listed at all
            record.provider in power.providers
            and (record.provider not in snapshot.instances or power.unknown(name)),
        )
        judged = judgment.verdicts.get(name)
        nodes[name] = project(view, judged) if judged is not None else view
    return ClusterView(
        now=snapshot.now,
        templates=template_views(settings, blocked(settings, snapshot, judgment)),
        nodes=nodes,
        pending=tuple(snapshot.workload.pending),
        running=tuple(snapshot.workload.running),
        resume_requests=dict(judgment.resume_requests),
        failures=tuple(snapshot.failures),
        month_spend=snapshot.month_spend,
    )


def blocked(settings: Settings, snapshot: Snapshot, judgment: Judgment) -> dict[str, str]:
    """template -> why it launches nothing now, with the failures and registrations this
    cycle judged already counted (protection.with_this_cycle)."""
    if not snapshot.health:
        return dict(snapshot.protected)
    failed: dict[str, list[str]] = {}
    for judged in judgment.having(*FAILING):
        record = snapshot.nodes.get(judged.node)
        kind = kind_of(judged.reason)
        if record is not None and record.template and kind:
            failed.setdefault(record.template, []).append(kind)
    registered = {
        snapshot.nodes[j.node].template or ""
        for j in judgment.having(Verdict.REGISTER)
        if j.node in snapshot.nodes
    }
    protected = with_this_cycle(snapshot.health, failed, registered, settings, snapshot.now)
    # what only the snapshot knows (a director wait, a test's own) stays
    return {**snapshot.protected, **protected} if failed else dict(snapshot.protected)


def node_view(
    record: NodeRecord,
    slurm: WorkloadNode | None,
    jobs_end: datetime | None,
    idle_since: datetime | None,
    power_unknown: bool = False,
) -> NodeView:
    """A node row with Slurm's view of it, as policies see it (the simulator builds its
    nodes through this too)."""
    return NodeView(
        name=record.name,
        kind=record.kind,
        state=record.state,
        template=record.template,
        slurm=slurm,
        instance_id=record.instance_id,
        instance_type=record.instance_type,
        market=record.market,
        request_id=record.request_id,
        launched_at=record.launched_at,
        state_since=record.state_since,
        idle_since=idle_since,
        jobs_end=jobs_end,
        power_unknown=power_unknown,
    )


def project(view: NodeView, judged: Judged) -> NodeView:
    if judged.verdict in SETTLING:
        return replace(view, state=NodeState.POWERED_DOWN, settling=True, instance_id=None)
    state = PROJECTED.get(judged.verdict)
    if state is None:
        return view
    if judged.verdict is Verdict.ADOPT and judged.instance is not None:
        instance = judged.instance
        return replace(
            view,
            state=state,
            instance_id=instance.instance_id,
            instance_type=instance.instance_type,
            market=instance.lifecycle,
            launched_at=instance.launch_time or view.launched_at,
        )
    return replace(view, state=state)

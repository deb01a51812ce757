"""Build the ClusterView from the database, Slurm's snapshot and the hook requests."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clustermgr.config import Settings
from clustermgr.db.models import InstanceRun, Node, NodeEvent
from clustermgr.lifecycle import NodeState
from clustermgr.scaling.view import (
    ClusterView,
    LaunchFailure,
    NodeView,
    PriceView,
    TemplateView,
)
from clustermgr.workload.base import WorkloadSnapshot

FAILURE_CODE = re.compile(r"^\(Code:(?P<kind>[A-Z_]+)\)")
FAILURE_MEMORY = timedelta(hours=1)


def template_views(settings: Settings) -> dict[str, TemplateView]:
    views = {}
    for t in settings.templates:
        provider = settings.provider(t.provider)
        increment, minimum = provider.billing
        views[t.name] = TemplateView(
            name=t.name,
            provider=provider.name,
            provider_type=provider.type,
            region=provider.region,
            partition=t.partition,
            instance_types=tuple(t.instance_types),
            cpus=t.cpus,
            memory_mb=t.memory_mb,
            gpus=t.gpus,
            gpu_model=t.gpu_model,
            features=frozenset(slurm_features(t.features, provider.name, provider.region, t.name)),
            max_nodes=t.node_limit,
            market=t.market,
            demand_mode=t.demand_mode,
            boot_timeout_s=t.boot_timeout_s,
            prices={k: PriceView(v.on_demand, v.spot) for k, v in t.prices.items()},
            billing_increment_s=increment,
            billing_minimum_s=minimum,
        )
    return views


def slurm_features(extra: Sequence[str], provider: str, region: str, template: str) -> list[str]:
    """The Features= of a template's nodes: its own plus provider, region and template."""
    return list(dict.fromkeys([*extra, provider, region, template]))


def build_view(
    session: Session,
    settings: Settings,
    snapshot: WorkloadSnapshot,
    resume_requests: Mapping[str, Sequence[str]],
    now: datetime,
) -> ClusterView:
    jobs_end: dict[str, datetime] = {}
    for job in snapshot.running:
        for node in job.nodes:
            if job.end_time and (node not in jobs_end or job.end_time > jobs_end[node]):
                jobs_end[node] = job.end_time
    nodes = {}
    columns = (
        Node.name,
        Node.kind,
        Node.state,
        Node.template,
        Node.instance_id,
        Node.instance_type,
        Node.market,
        Node.request_id,
        Node.launched_at,
        Node.state_since,
        Node.idle_since,
    )
    states = {s.value: s for s in NodeState}
    query = select(*columns).where(Node.state != NodeState.RETIRED.value)
    for (
        name,
        kind,
        state,
        template,
        iid,
        itype,
        market,
        rid,
        launched,
        since,
        idle,
    ) in session.execute(query):
        nodes[name] = NodeView(
            name=name,
            kind=kind,
            state=states[state],
            template=template,
            slurm=snapshot.nodes.get(name),
            instance_id=iid,
            instance_type=itype,
            market=market,
            request_id=rid,
            launched_at=launched,
            state_since=since,
            idle_since=idle,
            jobs_end=jobs_end.get(name),
        )
    return ClusterView(
        now=now,
        templates=template_views(settings),
        nodes=nodes,
        pending=tuple(snapshot.pending),
        running=tuple(snapshot.running),
        resume_requests=dict(resume_requests),
        failures=tuple(recent_failures(session, now)),
        month_spend=month_spend(session, now),
    )


def recent_failures(session: Session, now: datetime) -> list[LaunchFailure]:
    query = (
        select(NodeEvent.at, NodeEvent.reason, Node.template, Node.market)
        .join(Node)
        .where(NodeEvent.new_state == NodeState.FAILED.value)
        .where(NodeEvent.at >= now - FAILURE_MEMORY)
    )
    failures = []
    for at, reason, template, market in session.execute(query):
        found = FAILURE_CODE.match(reason or "")
        if found and template:
            failures.append(LaunchFailure(template, found["kind"], market or "on-demand", at))
    return failures


def month_spend(session: Session, now: datetime) -> float:
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    total = session.scalar(
        select(func.coalesce(func.sum(InstanceRun.cost), 0.0)).where(InstanceRun.ended_at >= start)
    )
    return float(total or 0.0)

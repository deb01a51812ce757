"""Observe: one snapshot per cycle (Slurm, clouds, hook requests, database), as plain data.

Everything after this step (reconcile, policies, clamp, act) works from this snapshot; act
never asks Slurm or a cloud for a second look in the middle of a cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clustermgr.config import Settings, slurm_features
from clustermgr.core.inputs import slurm_word_problem, usable_address
from clustermgr.db.models import InstanceRun, Node, NodeEvent
from clustermgr.db.ownership import Issued, Ownership, known
from clustermgr.imaging.launch_images import RegionImage
from clustermgr.nodes.states import NodeState
from clustermgr.policy.view import LaunchFailure, TemplateView
from clustermgr.providers.base import CloudInstance
from clustermgr.providers.launch_groups import PlacementGroup
from clustermgr.scaling.ownership import unheld
from clustermgr.scaling.protection import TemplateHealth
from clustermgr.workload.base import WorkloadSnapshot
from clustermgr.workload.hooks import HookRequest

FAILURE_MEMORY = timedelta(hours=1)
log = logging.getLogger(__name__)


class NodeRecord(NamedTuple):
    """One row of the nodes table as the cycle saw it (a NamedTuple: 10,000 are built per
    cycle, straight from the query's rows)."""

    name: str
    kind: str
    state: NodeState
    template: str | None
    provider: str | None
    instance_id: str | None = None
    instance_type: str | None = None
    private_address: str | None = None
    market: str | None = None
    request_id: str | None = None
    launched_at: datetime | None = None
    state_since: datetime | None = None
    state_reason: str = ""
    idle_since: datetime | None = None
    slurm_state: str | None = None
    image_revision: str | None = None
    kernel: str | None = None


@dataclass(frozen=True)
class Snapshot:
    now: datetime
    workload: WorkloadSnapshot
    nodes: Mapping[str, NodeRecord]
    instances: Mapping[str, Mapping[str, CloudInstance]]  # listed providers only
    provider_errors: Mapping[str, str] = field(default_factory=dict)
    requests: Sequence[HookRequest] = ()
    failures: Sequence[LaunchFailure] = ()
    month_spend: float = 0.0
    protected: Mapping[str, str] = field(default_factory=dict)  # template -> PROTECTED reason
    # the templates' failure counts as the database has them (protection.with_this_cycle
    # adds the cycle's own verdicts); empty: `protected` is taken as it is
    health: Mapping[str, TemplateHealth] = field(default_factory=dict)
    # template -> (Code:DIRECTOR) reason while its region's required director is not READY,
    # or (Code:IMAGE) while its region has no usable machine image of its image definition
    director_waits: Mapping[str, str] = field(default_factory=dict)
    director_instances: frozenset[str] = frozenset()  # instance ids director rows hold
    director_requests: frozenset[str] = frozenset()  # request ids of director launches
    # what the database proves cm-scale launched, of the listed instances no row holds
    ownership: Ownership = field(default_factory=Ownership)
    # instance ids held by node rows this cycle could not read: never orphans
    unreadable_instances: frozenset[str] = frozenset()
    controller_version: str = ""  # slurmctld's, for the user-data (nodes check their slurmd)
    # template -> its region's machine image, director and revision, for each template
    # naming an image definition (the launches' specs; a missing one is a wait above)
    images: Mapping[str, RegionImage] = field(default_factory=dict)
    # provider -> its per-launch placement groups (listed providers whose templates make
    # them), and when the database issued each group's request id (the ones it knows)
    placement_groups: Mapping[str, Sequence[PlacementGroup]] = field(default_factory=dict)
    group_requests: Mapping[str, Issued] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRows:
    records: dict[str, NodeRecord]
    unreadable_instances: frozenset[str] = frozenset()  # held by rows skipped this cycle


def read_nodes(session: Session) -> NodeRows:
    """Every node row the cycle can act on. A row is outside input like any other: one
    with an unknown state or a name Slurm would not take is skipped for this cycle with a
    warning (its instance is kept from the orphan sweep), and an address that is no host
    address is dropped (the node is not told to Slurm with it)."""
    columns = (
        Node.name,
        Node.kind,
        Node.state,
        Node.template,
        Node.provider,
        Node.instance_id,
        Node.instance_type,
        Node.private_address,
        Node.market,
        Node.request_id,
        Node.launched_at,
        Node.state_since,
        func.coalesce(Node.state_reason, ""),
        Node.idle_since,
        Node.slurm_state,
        Node.image_revision,
        Node.kernel,
    )
    states = {s.value: s for s in NodeState}
    query = select(*columns)  # RETIRED too: an instance a retired slot still holds is no orphan
    records = {}
    unreadable: set[str] = set()
    for row in session.execute(query):
        name, kind, state, template, provider, instance_id, instance_type, address, *rest = row
        problem = slurm_word_problem(name) or (
            None if state in states else f"unknown state {str(state)[:40]!r}"
        )
        if problem:
            log.warning("node %r skipped this cycle: %s in the database", name[:80], problem)
            if instance_id:
                unreadable.add(instance_id)
            continue
        if address:
            address = usable_address(address, f"node {name}")
        records[name] = NodeRecord(
            name,
            kind,
            states[state],
            template,
            provider,
            instance_id,
            instance_type,
            address,
            *rest,
        )
    return NodeRows(records, frozenset(unreadable))


def template_views(
    settings: Settings, protected: Mapping[str, str] | None = None
) -> dict[str, TemplateView]:
    views = {}
    for t in settings.templates:
        provider = settings.provider(t.provider)
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
            prices=t.price_table,
            billing=provider.billing,
            protected=(protected or {}).get(t.name),
            min_on=t.min_on,
            idle_kw=t.idle_kw,
            fallbacks=tuple(t.fallback_templates),
            all_or_nothing=t.all_or_nothing,
        )
    return views


def recent_failures(session: Session, now: datetime) -> list[LaunchFailure]:
    """Failures of the last hour with their kind (the reason_kind column, never the text)."""
    query = (
        select(NodeEvent.at, NodeEvent.reason_kind, Node.template, Node.market)
        .join(Node)
        .where(NodeEvent.new_state == NodeState.FAILED.value)
        .where(NodeEvent.at >= now - FAILURE_MEMORY)
        .where(NodeEvent.reason_kind.is_not(None))
    )
    return [
        LaunchFailure(template, kind, market or "on-demand", at)
        for at, kind, template, market in session.execute(query)
        if template and kind
    ]


def month_spend(session: Session, now: datetime) -> float:
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    total = session.scalar(
        select(func.coalesce(func.sum(InstanceRun.cost), 0.0)).where(InstanceRun.ended_at >= start)
    )
    return float(total or 0.0)


def read_ownership(
    session: Session,
    instances: Mapping[str, Mapping[str, CloudInstance]],
    held: set[str],
    held_requests: frozenset[str],
    skip: frozenset[str],
) -> Ownership:
    """What the database knows of the listed instances no row holds (their request ids and
    instance ids only). Read after the listing: an instance listed was launched before, so
    its request id was committed before this read."""
    candidates = [i for _, i in unheld(instances, held, held_requests, skip)]
    if not candidates:
        return Ownership()
    requests = {i.request_id for i in candidates if i.request_id}
    return known(session, requests, {i.instance_id for i in candidates})

"""`clustermgr nodes sync`: the node table from the config's templates and from Slurm.

Idempotent: a second run changes nothing. Names that leave a template's hostlist (or
on-prem nodes that leave Slurm) are RETIRED, never deleted; a slot that still holds an
instance is kept until it is powered down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import Settings, TemplateSettings, is_onprem
from clustermgr.db.models import Node, NodeEvent, Provider, Region, Template
from clustermgr.nodes.states import NodeState, transition
from clustermgr.workload.base import WorkloadNode

ACTOR = "nodes-sync"
RETIRABLE = frozenset({NodeState.POWERED_DOWN, NodeState.FAILED, NodeState.DOWN, NodeState.UP})


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    still_active: list[str] = field(default_factory=list)
    unmanaged_cloud: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.restored or self.retired or self.updated)


def sync_config_rows(session: Session, settings: Settings, now: datetime) -> None:
    """Mirror [[providers]] and [[templates]] into their tables (config is the truth)."""
    providers = {p.name: p for p in session.scalars(select(Provider))}
    for conf in settings.providers:
        row = providers.get(conf.name) or Provider(name=conf.name, created_at=now)
        values: dict[str, object] = {
            "type": conf.type,
            "region": conf.region,
            "credentials_source": conf.credentials.source,
        }
        if _assign(row, values) or row.id is None:
            row.updated_at = now
            session.add(row)
        session.flush()
        regions = {r.name for r in session.scalars(select(Region).filter_by(provider_id=row.id))}
        if conf.region not in regions:
            session.add(Region(provider_id=row.id, name=conf.region))
    templates = {t.name: t for t in session.scalars(select(Template))}
    for tconf in settings.templates:
        trow = templates.pop(tconf.name, None) or Template(name=tconf.name)
        provider = settings.provider(tconf.provider)
        template_values: dict[str, object] = {
            "provider_name": tconf.provider,
            "region": provider.region,
            "partition": tconf.partition,
            "hostlist": tconf.nodes,
            "instance_types": list(tconf.instance_types),
            "image": tconf.image,
            "cpus": tconf.cpus,
            "memory_mb": tconf.memory_mb,
            "gpu_model": tconf.gpu_model,
            "gpus": tconf.gpus,
            "max_nodes": tconf.node_limit,
            "market": tconf.market,
            "demand_mode": tconf.demand_mode,
            "retired": False,
        }
        if _assign(trow, template_values) or trow.id is None:
            trow.updated_at = now
            session.add(trow)
    for gone in templates.values():
        if not gone.retired:
            gone.retired = True
            gone.updated_at = now


def _assign(row: object, values: Mapping[str, object]) -> bool:
    changed = False
    for key, value in values.items():
        if getattr(row, key, None) != value:
            setattr(row, key, value)
            changed = True
    return changed


def sync_nodes(
    session: Session,
    settings: Settings,
    slurm_nodes: Mapping[str, WorkloadNode] | None,
    now: datetime | None = None,
) -> SyncReport:
    """Register template slots and (when `slurm_nodes` is given) on-prem nodes."""
    now = now or datetime.now(UTC)
    report = SyncReport()
    sync_config_rows(session, settings, now)
    existing = {n.name: n for n in session.scalars(select(Node))}
    wanted_cloud: set[str] = set()
    for template in settings.templates:
        provider = settings.provider(template.provider)
        for name in template.node_names:
            wanted_cloud.add(name)
            values = _cloud_values(template, provider.name, provider.region)
            initial = NodeState.POWERED_DOWN
            seen = (slurm_nodes or {}).get(name)
            if is_onprem(provider) and name not in existing and _running(seen):
                # an on-prem node that is on and in Slurm: UP, holding itself (its instance
                # id is its name), so policies may power it off once idle
                initial = NodeState.UP
                values |= {
                    "instance_id": name,
                    "instance_type": template.instance_types[0],
                    "market": "on-demand",
                    "launched_at": now,
                }
            _upsert(session, existing, name, "cloud", initial, values, now, report)
    if slurm_nodes is not None:
        for name, seen in sorted(slurm_nodes.items()):
            if name in wanted_cloud:
                continue
            if seen.is_cloud:
                report.unmanaged_cloud.append(name)
                continue
            state = NodeState.UP if seen.state != "DOWN" and seen.responding else NodeState.DOWN
            values = _onprem_values(seen)
            node = _upsert(session, existing, name, "onprem", state, values, now, report)
            if node.state != state.value and node.state != NodeState.RETIRED.value:
                transition(node, state, f"Slurm reports {seen.state}", ACTOR, now=now)
    for name, node in sorted(existing.items()):
        gone = (node.kind == "cloud" and name not in wanted_cloud) or (
            node.kind == "onprem" and slurm_nodes is not None and name not in slurm_nodes
        )
        if not gone or node.state == NodeState.RETIRED.value:
            continue
        retirable = node.state in {state.value for state in RETIRABLE}
        if retirable and not (node.kind == "cloud" and node.instance_id):
            where = "its template" if node.kind == "cloud" else "Slurm"
            transition(node, NodeState.RETIRED, f"no longer in {where}", ACTOR, now=now)
            report.retired.append(name)
        else:
            report.still_active.append(name)
    return report


def _running(seen: WorkloadNode | None) -> bool:
    return (
        seen is not None
        and seen.responding
        and not seen.powered_down
        and not seen.powering_up
        and seen.state not in ("DOWN", "FUTURE", "UNKNOWN")
    )


def _cloud_values(template: TemplateSettings, provider: str, region: str) -> dict[str, object]:
    return {
        "template": template.name,
        "provider": provider,
        "region": region,
        "partitions": template.partition,
        "cpus": template.cpus,
        "memory_mb": template.memory_mb,
        "gpus": template.gpus,
        "gpu_model": template.gpu_model,
    }


def _onprem_values(seen: WorkloadNode) -> dict[str, object]:
    return {
        "template": None,
        "provider": None,
        "region": None,
        "partitions": ",".join(seen.partitions),
        "cpus": seen.cpus,
        "memory_mb": seen.memory_mb,
        "gpus": seen.gpus,
        "gpu_model": seen.gpu_model,
        "private_address": seen.address,
        "hostname": seen.hostname,
        "slurm_state": "+".join([seen.state, *sorted(seen.flags)]),
    }


def _upsert(
    session: Session,
    existing: dict[str, Node],
    name: str,
    kind: str,
    initial: NodeState,
    values: Mapping[str, object],
    now: datetime,
    report: SyncReport,
) -> Node:
    node = existing.get(name)
    if node is None:
        node = Node(name=name, kind=kind, state=initial.value, state_since=now, created_at=now)
        node.state_reason = "registered"
        _assign(node, values)
        node.updated_at = now
        node.events.append(
            NodeEvent(
                at=now, old_state="NEW", new_state=initial.value, reason="registered", actor=ACTOR
            )
        )
        session.add(node)
        existing[name] = node
        report.added.append(name)
        return node
    if node.state == NodeState.RETIRED.value:
        node.kind = kind
        _assign(node, values)
        transition(node, initial, "back in the configuration", ACTOR, now=now)
        report.restored.append(name)
        return node
    if node.kind != kind or _assign(node, values):
        node.kind = kind
        node.updated_at = now
        report.updated.append(name)
    return node

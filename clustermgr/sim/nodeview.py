"""A simulated node as the daemon's view shows it: the record and Slurm's view of it that
`clustermgr.scaling.projection.node_view` turns into the NodeView policies read."""

from __future__ import annotations

from datetime import datetime, timedelta

from clustermgr.nodes.states import NodeState
from clustermgr.policy.view import NodeView, TemplateView
from clustermgr.scaling.observe import NodeRecord
from clustermgr.scaling.projection import node_view
from clustermgr.sim.model import SimNode
from clustermgr.workload.base import WorkloadNode

ONPREM = "onprem"  # the on-prem pool's name and partition


def sim_node_view(
    node: SimNode, cloud: bool, template: TemplateView | None, origin: datetime
) -> NodeView:
    def moment(at: float | None) -> datetime | None:
        return None if at is None else origin + timedelta(seconds=at)

    flags = {"CLOUD"} if cloud else set()
    if node.state is NodeState.POWERED_DOWN:
        flags.add("POWERED_DOWN")
    elif node.state in (NodeState.BOOTING, NodeState.REQUESTED):
        flags.add("POWERING_UP")
    state = "IDLE" if node.empty else ("ALLOCATED" if not node.free_cpus else "MIXED")
    slurm = WorkloadNode(
        name=node.name,
        state=state,
        flags=frozenset(flags),
        cpus=node.shape.cpus,
        memory_mb=node.shape.memory_mb,
        gpus=node.shape.gpus,
        gpu_model=template.gpu_model if template else None,
        partitions=(template.partition if template else ONPREM,),
    )
    active = node.launched_at is not None
    record = NodeRecord(
        name=node.name,
        kind="cloud" if cloud else "onprem",
        state=node.state,
        template=node.pool if cloud else None,
        provider=template.provider if template else None,
        instance_id=f"sim-{node.name}-{node.generation}" if active else None,
        instance_type=template.instance_types[0] if template and active else None,
        market=node.market,
        launched_at=moment(node.launched_at),
    )
    idle_since = moment(node.idle_since) if node.empty else None
    return node_view(record, slurm, moment(node.jobs_end), idle_since)

"""On-prem nodes (templates on ipmi/redfish providers): the rules the engine adds for them.

An on-prem template's nodes go through the same verdicts, launches and stops as cloud
nodes (launch = power on, terminate = graceful shutdown then chassis off, both by the
provider). What differs is physical: a powered-off node still exists, its BMC may not
answer, and a node with work on it must never lose power. These rules are pure functions
of the snapshot, and each applies only to nodes of on-prem providers, so cloud templates
behave exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clustermgr.config import Settings, is_onprem
from clustermgr.nodes.states import NodeState
from clustermgr.policy.view import ClusterView
from clustermgr.providers.base import CloudInstance, InstanceState
from clustermgr.workload.base import WorkloadNode

# Slurm flags that say the node takes no new job: drained, or on its way to power saving
OUT_OF_SCHEDULING = frozenset({"DRAIN", "POWER_DOWN", "POWERING_DOWN", "POWERED_DOWN"})
BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


@dataclass(frozen=True)
class PowerFacts:
    """The on-prem side of a snapshot: which providers power nodes, and each node's power."""

    providers: frozenset[str]  # names of ipmi/redfish providers
    power: Mapping[str, InstanceState]  # node -> its BMC's answer (listed providers only)

    def unknown(self, node: str) -> bool:
        """The node's BMC did not answer (or answered nothing readable) this cycle."""
        return self.power.get(node) is InstanceState.UNKNOWN


def onprem_providers(settings: Settings) -> frozenset[str]:
    return frozenset(p.name for p in settings.providers if is_onprem(p))


def power_facts(
    settings: Settings, instances: Mapping[str, Mapping[str, CloudInstance]]
) -> PowerFacts:
    providers = onprem_providers(settings)
    power = {
        instance.node_name or instance_id: instance.state
        for name in sorted(providers)
        for instance_id, instance in instances.get(name, {}).items()
    }
    return PowerFacts(providers, power)


def power_off_blocked(seen: WorkloadNode | None) -> str | None:
    """Why an on-prem node may not lose power now, or None when it may: Slurm must know the
    node, have nothing running or finishing on it, and keep jobs off it (drained, or
    powering down through its power saving)."""
    if seen is None:
        return "Slurm does not know the node"
    if seen.state in BUSY_STATES or seen.completing:
        return f"jobs run on it (Slurm: {seen.state})"
    if not seen.flags & OUT_OF_SCHEDULING:
        return f"not drained in Slurm (Slurm: {'+'.join([seen.state, *sorted(seen.flags)])})"
    return None


def power_saved_kw(view: ClusterView) -> float:
    """Estimated kW saved now: powered-off on-prem nodes x their template's idle power (a
    node whose BMC did not answer is not counted as off)."""
    return sum(
        template.idle_kw
        * sum(
            1 for node in view.burst_nodes(NodeState.POWERED_DOWN, name) if not node.power_unknown
        )
        for name, template in view.templates.items()
        if template.onprem
    )


__all__ = [
    "PowerFacts",
    "onprem_providers",
    "power_facts",
    "power_off_blocked",
    "power_saved_kw",
]

"""Pure translations between Nova's shapes and ours: names, states, flavors, instances."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from clustermgr.providers.base import TAG_NODE, CloudInstance, InstanceState, InstanceType

# Nova server status -> our state. A server being deleted (task_state "deleting") is STOPPING.
STATES: dict[str, InstanceState] = {
    "BUILD": InstanceState.PENDING,
    "REBUILD": InstanceState.PENDING,
    "ACTIVE": InstanceState.RUNNING,
    "REBOOT": InstanceState.RUNNING,
    "HARD_REBOOT": InstanceState.RUNNING,
    "PASSWORD": InstanceState.RUNNING,
    "RESIZE": InstanceState.RUNNING,
    "VERIFY_RESIZE": InstanceState.RUNNING,
    "REVERT_RESIZE": InstanceState.RUNNING,
    "MIGRATING": InstanceState.RUNNING,
    "RESCUE": InstanceState.RUNNING,
    "SHUTOFF": InstanceState.STOPPING,
    "STOPPED": InstanceState.STOPPING,
    "SUSPENDED": InstanceState.STOPPING,
    "PAUSED": InstanceState.STOPPING,
    "SHELVED": InstanceState.STOPPING,
    "SHELVED_OFFLOADED": InstanceState.STOPPING,
    "SOFT_DELETED": InstanceState.TERMINATED,
    "DELETED": InstanceState.TERMINATED,
    "ERROR": InstanceState.ERROR,
    "UNKNOWN": InstanceState.UNKNOWN,
}

# Flavor extra specs that say how many GPUs a flavor has:
#   "pci_passthrough:alias": "a100:8"            (PCI passthrough; alias name is the model)
#   "resources:PGPU": "2" / "resources:VGPU": "1" (placement; model from a CUSTOM_GPU_* trait)
PCI_ALIAS = "pci_passthrough:alias"
GPU_RESOURCES = ("resources:PGPU", "resources:VGPU")
GPU_TRAIT = re.compile(r"^trait:CUSTOM_GPU_(?P<model>[A-Z0-9_]+)$")
ARCH_SPECS = ("capabilities:cpu_info:arch", "hw:cpu_arch")


def server_name(cluster: str, node: str) -> str:
    """The one server name a node ever gets in this cluster (idempotency looks it up)."""
    return f"{cluster}-{node}"


def instance_state(status: str | None, task_state: str | None = None) -> InstanceState:
    if task_state == "deleting":
        return InstanceState.STOPPING
    return STATES.get((status or "").upper(), InstanceState.UNKNOWN)


def gpus_of(specs: Mapping[str, Any]) -> tuple[str | None, int]:
    """(model, count) from a flavor's extra specs; PCI aliases are all taken as GPUs."""
    alias = str(specs.get(PCI_ALIAS) or "")
    if alias:
        model: str | None = None
        count = 0
        for part in alias.split(","):
            name, _, number = part.strip().partition(":")
            model = model or (name.strip().lower() or None)
            count += _int(number, 1)
        return model, count
    count = sum(_int(specs.get(key), 0) for key in GPU_RESOURCES)
    if not count:
        return None, 0
    traits = (GPU_TRAIT.match(str(key)) for key, value in specs.items() if value == "required")
    found = next((t.group("model").lower() for t in traits if t), None)
    return found, count


def instance_type_of(flavor: Any) -> InstanceType:
    specs = dict(getattr(flavor, "extra_specs", None) or {})
    model, count = gpus_of(specs)
    arch = next((str(specs[k]) for k in ARCH_SPECS if specs.get(k)), "x86_64")
    return InstanceType(
        name=str(flavor.name),
        vcpus=int(flavor.vcpus or 0),
        memory_mb=int(flavor.ram or 0),
        gpu_model=model,
        gpu_count=count,
        architecture=arch,
    )


def flavor_name(server: Any, names_by_id: Mapping[str, str]) -> str:
    """The flavor name: embedded (microversion >= 2.47) or looked up by id (older)."""
    flavor = getattr(server, "flavor", None)
    if flavor is None:
        return ""
    name = getattr(flavor, "original_name", None) or getattr(flavor, "name", None)
    flavor_id = str(getattr(flavor, "id", "") or "")
    return str(names_by_id.get(flavor_id) or name or flavor_id)


def private_address(addresses: Mapping[str, Any] | None) -> str | None:
    """The first fixed IPv4 address, else the first address of any kind."""
    found: list[tuple[int, str]] = []
    for entries in (addresses or {}).values():
        for entry in entries or []:
            addr = entry.get("addr")
            if not addr:
                continue
            fixed = entry.get("OS-EXT-IPS:type", "fixed") == "fixed"
            rank = (0 if fixed else 2) + (0 if entry.get("version", 4) == 4 else 1)
            found.append((rank, str(addr)))
    return min(found)[1] if found else None


def instance_of(server: Any, names_by_id: Mapping[str, str]) -> CloudInstance:
    tags = {str(k): str(v) for k, v in (getattr(server, "metadata", None) or {}).items()}
    launched = getattr(server, "launched_at", None) or getattr(server, "created_at", None)
    return CloudInstance(
        instance_id=str(server.id),
        node_name=tags.get(TAG_NODE),
        state=instance_state(server.status, getattr(server, "task_state", None)),
        private_address=private_address(getattr(server, "addresses", None)),
        instance_type=flavor_name(server, names_by_id),
        zone=getattr(server, "availability_zone", None) or None,
        lifecycle="on-demand",
        launch_time=parse_time(launched),
        tags=tags,
    )


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    text = str(value).replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)  # Nova's times are UTC


def _int(value: Any, default: int) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default

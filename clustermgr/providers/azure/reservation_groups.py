"""Azure capacity reservation groups (Compute REST API, 2021-04-01 and later):

- a VM joins a group with `properties.capacityReservation.capacityReservationGroup.id`
  (VirtualMachines_CreateOrUpdate, "Associate a VM to a capacity reservation group");
- a group's member reservations, `Microsoft.Compute/capacityReservationGroups/{group}/
  capacityReservations` (CapacityReservations_ListByCapacityReservationGroup), each with
  `sku.name` (the VM size) and `sku.capacity` (instances reserved), and with
  `$expand=instanceView` (CapacityReservations_Get) `instanceView.utilizationInfo.
  virtualMachinesAllocated`, the VMs it holds.

Azure overallocates a group: a VM beyond its reserved capacity is still created while the
region has room, without the reservation's capacity guarantee ("Overallocate capacity
reservation", Azure docs). So `reservation_fallback = "on-demand"` launches every node in the
group and says how many go beyond what it reserves; `"none"` launches only as many as the
group has free for the template's sizes and fails the rest, naming the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import LaunchError, LaunchSpec, ReservationTarget
from clustermgr.providers.reservations import ReservationFacts

JSON = dict[str, Any]
NO_ROOM_CODE = "CapacityReservationGroupFull"


def group_id(subscription: str, resource_group: str, ref: str) -> str:
    """A group's resource id: `ref` as given when it is one, else a name in the provider's
    resource group."""
    if ref.startswith("/subscriptions/"):
        return ref
    return (
        f"/subscriptions/{subscription}/resourceGroups/{resource_group}"
        f"/providers/Microsoft.Compute/capacityReservationGroups/{ref}"
    )


def group_parts(resource_id: str) -> tuple[str, str]:
    """(resource group, group name) of a group's resource id."""
    segs = [s for s in resource_id.split("/") if s]
    low = [s.lower() for s in segs]
    return segs[low.index("resourcegroups") + 1], segs[-1]


def vm_properties(spec: LaunchSpec) -> JSON:
    """The VM properties that put it in the spec's group ({} for none)."""
    target = spec.reservation
    if target is None or target.kind != "group":
        return {}
    return {"capacityReservation": {"capacityReservationGroup": {"id": target.ref}}}


def resolved(spec: LaunchSpec, subscription: str, resource_group: str) -> LaunchSpec:
    """The spec with its group as a full resource id."""
    target = spec.reservation
    if target is None or target.kind != "group":
        return spec
    full = group_id(subscription, resource_group, target.ref)
    return replace(spec, reservation=replace(target, ref=full))


def to_facts(group: str, item: Any) -> ReservationFacts:
    """One member reservation (CapacityReservations_Get with its instance view)."""
    sku = item.sku
    view = item.instance_view
    usage = view.utilization_info if view is not None else None
    held = len(usage.virtual_machines_allocated or []) if usage is not None else 0
    total = int(sku.capacity or 0)
    state = str(item.provisioning_state or "unknown").lower()
    return ReservationFacts(
        reservation_id=group,
        kind="group",
        instance_type=str(sku.name or ""),
        total=total,
        available=max(0, total - held),
        state="active" if state == "succeeded" else state,
        zone=(item.zones or [None])[0],
    )


def whole_group(group: str, members: Sequence[ReservationFacts]) -> ReservationFacts:
    """A group as one row: its members' sizes, totals and free counts added up."""
    sizes = ",".join(sorted({m.instance_type for m in members}))
    states = {m.state for m in members}
    return ReservationFacts(
        reservation_id=group,
        kind="group",
        instance_type=sizes,
        total=sum(m.total for m in members),
        available=sum(m.available for m in members),
        state=states.pop() if len(states) == 1 else "mixed",
    )


def free_for(facts: Sequence[ReservationFacts], sizes: Sequence[str]) -> tuple[int, int]:
    """(free, total) of the group's reservations of these VM sizes."""
    wanted = {s.lower() for s in sizes}
    mine = [f for f in facts if f.instance_type.lower() in wanted]
    return sum(f.available for f in mine), sum(f.total for f in mine)


def short_name(target: ReservationTarget) -> str:
    """A group's name for a reason (a whole resource id would not fit Slurm's reason)."""
    if not target.ref.startswith("/subscriptions/"):
        return target.ref
    resource_group, name = group_parts(target.ref)
    return f"{name} (resource group {resource_group})"


def held_back(
    target: ReservationTarget, free: int, total: int, missing: int, whole: bool = False
) -> LaunchError:
    """The nodes a full group does not launch (reservation_fallback = none); `whole`: all of
    a job's nodes, launched all or nothing."""
    held = (
        f"the job's {missing} node(s) not launched, all or nothing"
        if whole
        else (f"{missing} node(s) not launched")
    )
    message = (
        f"capacity reservation group {short_name(target)} has {free} of {total} free; "
        f"{held} (reservation_fallback = none)"
    )
    return LaunchError(ErrorKind.CAPACITY, NO_ROOM_CODE, message, count=missing)


def beyond_line(target: ReservationTarget, free: int, count: int, request_id: str) -> str:
    return (
        f"request {request_id}: capacity reservation group {short_name(target)} has {free} free; "
        f"{count - free} of {count} VM(s) go beyond it, on-demand without its capacity "
        "guarantee (reservation_fallback = on-demand)"
    )

"""Capacity reservation groups for FakeAzure, in the Compute REST API's shapes
(Microsoft.Compute, api-version 2021-04-01 and later; azure-rest-api-specs
`capacityReservation.json`):

- `GET .../capacityReservationGroups/{group}`: `properties.capacityReservations` (ids) and
  `virtualMachinesAssociated` (CapacityReservationGroups_Get);
- `GET .../capacityReservationGroups/{group}/capacityReservations`: each member with
  `sku: {name, capacity}` (CapacityReservations_ListByCapacityReservationGroup);
- `GET .../capacityReservations/{name}?$expand=instanceView`: `properties.instanceView.
  utilizationInfo: {currentCapacity, virtualMachinesAllocated: [{id}]}` (CapacityReservations_Get);
- a VM PUT with `properties.capacityReservation.capacityReservationGroup.id` is allocated
  against the member of its size; a member with no room still takes it (overallocation:
  "Overallocate capacity reservation", Azure docs: the VM runs without the guarantee and is
  listed in virtualMachinesAllocated). A group with no member of the VM's size refuses it
  (400), as Azure does.

A member's capacity is finite: `sku.capacity` minus the VMs allocated is what is free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass
class FakeMember:
    name: str
    size: str
    capacity: int
    vms: list[str] = field(default_factory=list)  # ids of the VMs allocated against it


@dataclass
class FakeGroup:
    name: str
    members: dict[str, FakeMember] = field(default_factory=dict)  # by lower-cased name


def group_json(group: FakeGroup, rid: str) -> JSON:
    return {
        "id": rid,
        "name": group.name,
        "type": "Microsoft.Compute/capacityReservationGroups",
        "properties": {
            "capacityReservations": [
                {"id": f"{rid}/capacityReservations/{m.name}"} for m in group.members.values()
            ],
            "virtualMachinesAssociated": [
                {"id": vm} for m in group.members.values() for vm in m.vms
            ],
        },
    }


def member_json(member: FakeMember, group_rid: str, location: str, view: bool) -> JSON:
    props: JSON = {
        "provisioningState": "Succeeded",
        "reservationId": f"00000000-0000-0000-0000-{abs(hash(member.name)) % 10**12:012d}",
    }
    if view:
        props["instanceView"] = {
            "utilizationInfo": {
                "currentCapacity": member.capacity,
                "virtualMachinesAllocated": [{"id": vm} for vm in member.vms],
            },
            "statuses": [{"code": "ProvisioningState/succeeded", "level": "Info"}],
        }
    return {
        "id": f"{group_rid}/capacityReservations/{member.name}",
        "name": member.name,
        "type": "Microsoft.Compute/capacityReservationGroups/capacityReservations",
        "location": location,
        "sku": {"name": member.size, "capacity": member.capacity},
        "properties": props,
    }


def group_of(body: JSON) -> str | None:
    """The group a VM PUT body names (its last id segment, lower-cased), if any."""
    ref = (
        body.get("properties", {})
        .get("capacityReservation", {})
        .get("capacityReservationGroup", {})
        .get("id")
    )
    return str(ref).rsplit("/", 1)[-1].lower() if ref else None

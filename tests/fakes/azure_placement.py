"""Proximity placement groups for FakeAzure, in the Compute REST API's shapes
(azure-rest-api-specs `proximityPlacementGroup.json`): PUT
`.../proximityPlacementGroups/{name}` answers 200/201 with the group at once (no async
operation); GET one or the resource group's list (`value`); DELETE answers 200. A group's
`properties.virtualMachines` lists the VMs whose body names it
(`properties.proximityPlacementGroup.id`), as ProximityPlacementGroups_Get does.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]


def group_json(name: str, rid: str, location: str, tags: JSON, vms: list[str]) -> JSON:
    return {
        "id": rid,
        "name": name,
        "type": "Microsoft.Compute/proximityPlacementGroups",
        "location": location,
        "tags": tags,
        "properties": {
            "proximityPlacementGroupType": "Standard",
            "virtualMachines": [{"id": vm} for vm in vms],
        },
    }


def members(vms: list[JSON], rid: str) -> list[str]:
    """The ids of the VMs whose body names the group."""
    return [
        vm["id"]
        for vm in vms
        if str(vm["properties"].get("proximityPlacementGroup", {}).get("id", "")).lower()
        == rid.lower()
    ]

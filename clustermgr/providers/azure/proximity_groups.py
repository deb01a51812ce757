"""Per-launch proximity placement groups on Azure (a template's `placement = "per-launch"`).

The shapes, from the Compute REST API (azure-rest-api-specs `proximityPlacementGroup.json`,
azure-mgmt-compute's ProximityPlacementGroupsOperations): `create_or_update(rg, name,
{location, tags, properties: {proximityPlacementGroupType: "Standard"}})` (PUT, answered at
once: no long-running operation) returns the group with its `id`; `list_by_resource_group`;
`delete(rg, name)`. A VM joins it by `properties.proximityPlacementGroup.id` in its body
(shapes.vm_body, from the spec's placement_group).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from clustermgr.providers.azure.errors import SDK_ERRORS, classify, is_not_found
from clustermgr.providers.base import TAG_CLUSTER, TAG_REQUEST, TAG_TEMPLATE, LaunchSpec, ours
from clustermgr.providers.launch_groups import NAME_LIMITS, PlacementGroup, group_name, wants_group

log = logging.getLogger(__name__)

NAME_LIMIT = NAME_LIMITS[1]  # Azure compute names (availability sets, VMs): 1-80 characters


class ProximityGroups:
    def __init__(
        self,
        cluster: str,
        region: str,
        resource_group: str,
        compute: Callable[[], Any],
        call: Callable[[str, Callable[[], Any]], Any],
    ) -> None:
        self.cluster, self.region, self.resource_group = cluster, region, resource_group
        self.compute, self.call = compute, call

    def ensure(self, spec: LaunchSpec, count: int, request_id: str) -> str | None:
        """The resource id of this launch's group, made now (None: the launch gets none).
        A PUT of the same body again (a retried launch) leaves it as it is."""
        if not wants_group(spec, count):
            return None
        name = group_name(self.cluster, spec.template, request_id, NAME_LIMIT)
        body = {
            "location": self.region,
            "tags": ours(self.cluster, spec.template, request_id, {}),
            "properties": {"proximityPlacementGroupType": "Standard"},
        }
        ops = self.compute().proximity_placement_groups
        made = self.call(
            f"making proximity placement group {name}",
            lambda: ops.create_or_update(self.resource_group, name, body),
        )
        return str(made.id)

    def listed(self) -> list[PlacementGroup]:
        ops = self.compute().proximity_placement_groups
        found = self.call(
            "listing proximity placement groups",
            lambda: list(ops.list_by_resource_group(self.resource_group)),
        )
        groups = []
        for item in found:
            tags = dict(item.tags or {})
            if tags.get(TAG_CLUSTER) == self.cluster and tags.get(TAG_REQUEST):
                name = str(item.name)
                groups.append(
                    PlacementGroup(name, name, tags[TAG_REQUEST], tags.get(TAG_TEMPLATE, ""))
                )
        return groups

    def delete(self, group: PlacementGroup) -> bool:
        try:
            self.compute().proximity_placement_groups.delete(self.resource_group, group.name)
        except SDK_ERRORS as exc:
            if is_not_found(exc):
                return True
            # the code Azure gives a group a VM still names is not pinned down here: any
            # refusal is logged and the next cycle tries again
            failure = classify(exc)
            log.warning(
                "proximity placement group %s not deleted (%s): %s",
                group.name,
                failure.code,
                failure.message,
            )
            return False
        return True

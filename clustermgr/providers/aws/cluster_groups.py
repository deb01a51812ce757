"""Per-launch cluster placement groups on AWS (a template's `placement = "per-launch"`).

The shapes, from the EC2 API reference:
- CreatePlacementGroup: `GroupName` (up to 255 ASCII characters, unique in the region),
  `Strategy: cluster`, `TagSpecifications: [{ResourceType: placement-group, Tags}]`; a name
  that exists answers `InvalidPlacementGroup.Duplicate` (a retried launch: it is ours).
- DescribePlacementGroups: `Filters` (`tag:KEY`), answer `PlacementGroups[]` with
  `GroupName`, `GroupId`, `State`, `Strategy`, `Tags` (no creation time, no members).
- DeletePlacementGroup: `GroupName`; `InvalidPlacementGroup.InUse` ("The placement group
  '...' is in use and may not be deleted") while an instance is still in it, shutting-down
  ones included; `InvalidPlacementGroup.Unknown` once it is gone.
- CreateFleet: `LaunchTemplateConfigs[].Overrides[].Placement.GroupName` puts the fleet's
  instances in the group (the launch template stays the template's, one version for every
  launch); RunInstances (the fallback): `Placement.GroupName`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from clustermgr.core.errors import ProviderError
from clustermgr.providers.aws.errors import SDK_ERRORS, classify
from clustermgr.providers.base import TAG_CLUSTER, TAG_REQUEST, TAG_TEMPLATE, LaunchSpec, ours
from clustermgr.providers.launch_groups import PlacementGroup, group_name, wants_group

log = logging.getLogger(__name__)

JSON = dict[str, Any]
EXISTS = "InvalidPlacementGroup.Duplicate"
IN_USE = "InvalidPlacementGroup.InUse"
GONE = "InvalidPlacementGroup.Unknown"


class ClusterGroups:
    """Makes, lists and deletes this cluster's per-launch groups. `call(what, fn)` runs SDK
    calls and raises the provider's one-line ProviderError."""

    def __init__(
        self, cluster: str, ec2: Callable[[], Any], call: Callable[[str, Callable[[], Any]], Any]
    ) -> None:
        self.cluster = cluster
        self.ec2 = ec2
        self.call = call

    def ensure(self, spec: LaunchSpec, count: int, request_id: str) -> str | None:
        """The group this launch goes into, made now (None: the launch gets none)."""
        if not wants_group(spec, count):
            return None
        name = group_name(self.cluster, spec.template, request_id)
        tags = ours(self.cluster, spec.template, request_id, {})
        request: JSON = {
            "GroupName": name,
            "Strategy": "cluster",
            "TagSpecifications": [
                {
                    "ResourceType": "placement-group",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        }

        def create() -> None:
            try:
                self.ec2().create_placement_group(**request)
            except SDK_ERRORS as exc:
                if classify(exc).code != EXISTS:  # a retried launch finds its own group
                    raise

        self.call(f"making placement group {name}", create)
        return name

    def listed(self) -> list[PlacementGroup]:
        mine = [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]}]
        answer = self.call(
            "listing placement groups",
            lambda: self.ec2().describe_placement_groups(Filters=mine),
        )
        return [g for g in (_group(item) for item in answer.get("PlacementGroups", [])) if g]

    def delete(self, group: PlacementGroup) -> bool:
        try:
            self.ec2().delete_placement_group(GroupName=group.name)
        except SDK_ERRORS as exc:
            failure = classify(exc)
            if failure.code == GONE:
                return True
            if failure.code == IN_USE:
                log.info("placement group %s still holds instances: deleted later", group.name)
                return False
            raise
        return True

    def drop(self, group: PlacementGroup) -> None:
        """Delete the group of a launch that started nothing, now: the cycle's sweep would
        find it empty only after the orphan grace (and, after a scarce period, many)."""
        try:
            self.call(f"deleting placement group {group.name}", lambda: self.delete(group))
        except ProviderError as exc:
            log.warning("placement group %s not deleted: %s", group.name, exc)


def _group(item: Mapping[str, Any]) -> PlacementGroup | None:
    tags = {str(t["Key"]): str(t.get("Value", "")) for t in item.get("Tags") or ()}
    request = tags.get(TAG_REQUEST)
    if not request or item.get("State") in ("deleting", "deleted"):
        return None
    name = str(item.get("GroupName", ""))
    return PlacementGroup(name, name, request, tags.get(TAG_TEMPLATE, ""))


def with_group(request: JSON, group: str | None) -> JSON:
    """A CreateFleet request whose every override puts its instances in `group`."""
    if group is None:
        return request
    for config in request.get("LaunchTemplateConfigs", []):
        for override in config.get("Overrides", []):
            override["Placement"] = {"GroupName": group}
    return request


def run_with_group(request: JSON, group: str | None) -> JSON:
    """A RunInstances request into `group` (beside its zone, if it has one)."""
    if group is None:
        return request
    return {**request, "Placement": {**request.get("Placement", {}), "GroupName": group}}

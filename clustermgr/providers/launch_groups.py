"""Per-launch compact placement (a template's `placement = "per-launch"`).

Each launch of 2 or more instances gets a placement group of its own, made just before the
launch and named from the cluster, the template and the launch's request id: an AWS cluster
placement group, an Azure proximity placement group, an OpenStack server group (affinity or
soft-affinity). A retry of the launch (same request id) finds the group again. The group is
tagged as the instances are (cluster, template, request id; Nova server groups take no tags,
so there the name carries them), and deleted by the cycle once nothing holds it: no node row
carries its request id and no listed instance its request tag (scaling/spent_groups.py), which
also finds the group a crash left between its creation and the launch. As with instances,
a group is only deleted when the database proves cm-scale issued its request id.

A provider offers this as `PlacementGroups`: it makes the group inside its `launch` (the
point where one launch order reaches the cloud, so a launch per job gets a group per job).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from clustermgr.providers.base import LaunchSpec

PREFIX = "cm-pg-"
# the request ids cm-scale issues (scaling/clamp.py new_request_id), read back from a name
_REQUEST_AT_END = re.compile(r"-(r-[0-9a-f]{16})$")


@dataclass(frozen=True)
class PlacementGroup:
    """One group cm-scale made, as its cloud lists it. `group_id`: what deletion takes (the
    name on AWS and Azure, the id on OpenStack)."""

    name: str
    group_id: str
    request_id: str
    template: str = ""
    members: int = 0  # instances the cloud says are in it (0 where it does not say)


@runtime_checkable
class PlacementGroups(Protocol):
    def placement_groups(self) -> list[PlacementGroup]:
        """The groups made for this cluster's launches (one listing call)."""
        ...

    def delete_placement_group(self, group: PlacementGroup) -> bool:
        """Delete it; True when it is gone (or was), False when the cloud still holds it (an
        instance still in it): the next cycle tries again."""
        ...


def wants_group(spec: LaunchSpec, count: int) -> bool:
    """A launch gets a group of its own: per-launch placement, 2 or more instances."""
    return spec.launch_group is not None and count >= 2


def group_name(cluster: str, template: str, request_id: str, limit: int = 255) -> str:
    """`cm-pg-CLUSTER-TEMPLATE-REQUEST`, at most `limit` characters: when longer, the middle
    becomes a digest and the request id stays whole at the end."""
    name = f"{PREFIX}{cluster}-{template}-{request_id}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(f"{cluster}\0{template}".encode()).hexdigest()
    room = max(8, limit - len(PREFIX) - len(request_id) - 2)
    return f"{PREFIX}{digest[:room]}-{request_id}"


NAME_LIMITS = (255, 80)  # AWS and Nova names; Azure's


def group_names(cluster: str, template: str, request_id: str) -> frozenset[str]:
    """Every name cm-scale gives the group of this request (one per cloud's name limit)."""
    return frozenset(group_name(cluster, template, request_id, limit) for limit in NAME_LIMITS)


def request_of_name(name: str) -> str | None:
    """The request id a group's name carries (None: not a name cm-scale gives). Whose it is
    the database decides (scaling/spent_groups.py): a name proves nothing."""
    if not name.startswith(PREFIX):
        return None
    found = _REQUEST_AT_END.search(name)
    return found.group(1) if found else None

"""Per-launch placement groups no launch needs any more (providers/launch_groups.py):
judged from the snapshot like orphan instances (scaling/ownership.py), deleted by act.

A group is spent when the database proves cm-scale made it (a group's tags prove nothing:
cm-scale issued its request id, for a template, and the group's name is the one cm-scale
gives that request's group, `launch_groups.group_names`), that request was issued longer
than the orphan grace period ago, no node row carries the request id (LAUNCHING, or
holding an instance it launched: the id is cleared when the node lets its instance go),
and no live instance its provider listed carries it as its request tag. That covers both
the group whose nodes are gone and the one a crash left between its creation and the
launch (its nodes failed or were re-launched under their own request). Groups are judged
only for providers listed this cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from clustermgr.db.ownership import Issued
from clustermgr.providers.base import CloudInstance, InstanceState
from clustermgr.providers.launch_groups import PlacementGroup, group_names
from clustermgr.scaling.observe import NodeRecord


def spent_groups(
    cluster: str,
    groups: Mapping[str, Sequence[PlacementGroup]],
    instances: Mapping[str, Mapping[str, CloudInstance]],
    nodes: Mapping[str, NodeRecord],
    issued: Mapping[str, Issued],
    now: datetime,
    grace_s: float,
) -> dict[str, list[PlacementGroup]]:
    """provider -> the groups to delete, in name order."""
    held = {r.request_id for r in nodes.values() if r.request_id}
    spent: dict[str, list[PlacementGroup]] = {}
    for provider, found in sorted(groups.items()):
        listing = instances.get(provider)
        if listing is None:  # not listed this cycle: its instances are unknown
            continue
        live = {
            i.request_id
            for i in listing.values()
            if i.state is not InstanceState.TERMINATED and i.request_id
        }
        for group in sorted(found, key=lambda g: g.name):
            request = issued.get(group.request_id)
            if request is None or group.request_id in held or group.request_id in live:
                continue
            if group.name not in group_names(cluster, request.owner, group.request_id):
                continue  # not a name cm-scale gives: someone else's, whatever its tags say
            if (now - request.at).total_seconds() >= grace_s:
                spent.setdefault(provider, []).append(group)
    return spent

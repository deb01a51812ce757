"""Director instances no director row holds: which the director lifecycle terminates.

An instance is a director's by its row (the instance id it holds, or the request id of its
launch in progress), never by its tag alone: anyone with the cloud account can set
`clustermgr-role=director`. A stray is terminated only when the database proves cm-scale
launched it (`Ownership`); one that only carries the tags is foreign: the scaling cycle
reports it and nobody terminates it (docs/security.md, "What cm-scale may terminate").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from clustermgr.db.ownership import Ownership
from clustermgr.directors.health import DirectorInfo
from clustermgr.directors.states import DirectorState
from clustermgr.providers.base import CloudInstance, InstanceState

TAG_ROLE = "clustermgr-role"  # letters, digits and '-': valid on every cloud (base.py)
ROLE_DIRECTOR = "director"


def is_director(instance: CloudInstance) -> bool:
    """Tagged as a director: what the tag says, not what the database holds."""
    return instance.tags.get(TAG_ROLE) == ROLE_DIRECTOR


def age_s(now: datetime, since: datetime | None) -> float:
    return (now - since).total_seconds() if since is not None else 0.0


def orphan_directors(
    listings: Mapping[str, Mapping[str, CloudInstance]],
    rows: Sequence[DirectorInfo],
    now: datetime,
    grace_s: float,
    ownership: Ownership,
) -> dict[str, list[str]]:
    """Director instances (by tag) that no director row holds, by instance id or by the
    request id of a launch in progress, older than the grace period, and that cm-scale
    launched (`ownership`: a request id it issued or an instance id it recorded): provider
    -> ids. One that only carries the tags is foreign: the scaling cycle reports it, nobody
    terminates it."""
    found: dict[str, list[str]] = {}
    for provider, instance in unheld_directors(listings, rows):
        if not ownership.ours(instance.instance_id, instance.request_id):
            continue
        if age_s(now, instance.launch_time) >= grace_s:
            found.setdefault(provider, []).append(instance.instance_id)
    return found


def unheld_directors(
    listings: Mapping[str, Mapping[str, CloudInstance]], rows: Sequence[DirectorInfo]
) -> list[tuple[str, CloudInstance]]:
    """Live instances tagged as directors that no row holds (instance id, or the request id
    of a launch in progress), in provider and id order."""
    held = {r.instance_id for r in rows if r.instance_id}
    requests = {r.request_id for r in rows if r.request_id and r.state is DirectorState.LAUNCHING}
    return [
        (provider, instance)
        for provider, listing in sorted(listings.items())
        for instance in sorted(listing.values(), key=lambda i: i.instance_id)
        if is_director(instance)
        and instance.state is not InstanceState.TERMINATED
        and instance.instance_id not in held
        and instance.request_id not in requests
    ]

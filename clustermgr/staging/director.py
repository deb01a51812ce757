"""`{director}` in a region's `rsync_target` (`rsync://{director}/clustermgr-staging`): the
address of the region's director, looked up when a transfer runs (a replaced director has
a new address), and only while it is READY."""

from __future__ import annotations

from clustermgr.config import Settings
from clustermgr.db.engine import Database
from clustermgr.directors.state import SERVING, DirectorState, director_name, find
from clustermgr.errors import StagingError

PLACEHOLDER = "{director}"


def resolve(settings: Settings, database: Database, area: str) -> str:
    """`area` with `{director}` replaced by the region's READY director's address."""
    if PLACEHOLDER not in area:
        return area
    region = next(
        (
            r
            for r in settings.staging.regions
            if r.rsync_target and area.startswith(r.rsync_target.rstrip("/") + "/")
        ),
        None,
    )
    if region is None:
        raise StagingError(f"{area}: no [[staging.regions]] rsync_target holds this area")
    provider = settings.provider(region.provider)
    name = director_name(provider.name, provider.region)
    with database.session() as session:
        director = find(session, name)
        state = director.state if director else "not launched"
        address = director.private_address if director else None
    if director is None or DirectorState(state) not in SERVING or not address:
        raise StagingError(
            f"director {name} is {state}: its staging area is not reachable; the transfer "
            "can run again once it is READY (clustermgr directors list)"
        )
    return area.replace(PLACEHOLDER, address)

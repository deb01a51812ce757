"""`{director}` in a region's `rsync_target` (`rsync://{director}/clustermgr-staging`): the
address of the region's director, looked up when a transfer runs (a replaced director has
a new address), and only while it is READY. A transfer that finds it not READY waits
(its row `waiting`), and the regions of waiting transfers are burst demand for the
director lifecycle, so cm-scale brings their directors up."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from clustermgr.config import Settings, StagingRegionSettings
from clustermgr.core.errors import StagingError
from clustermgr.db.database import Database
from clustermgr.db.models import Transfer
from clustermgr.directors.states import SERVING, DirectorState, director_name, find
from clustermgr.staging.rsyncd_auth import without_user

PLACEHOLDER = "{director}"
WAITING = "waiting"


@dataclass(frozen=True)
class Reach:
    """Where an area is reachable, or why not yet."""

    area: str  # with the director's address, when it is READY
    director: str  # the director's name ("" for an area without {director})
    state: str
    ready: bool
    address: str = ""  # what replaced {director}

    def waiting_line(self) -> str:
        return (
            f"waiting for director {self.director} ({self.state}): cm-scale brings it up "
            "(clustermgr directors list)"
        )


def region_of(settings: Settings, area: str) -> StagingRegionSettings | None:
    """The region whose rsync_target holds `area` (a daemon area's `user@` aside)."""
    plain = without_user(area)
    return next(
        (
            r
            for r in settings.staging.regions
            if r.rsync_target and plain.startswith(without_user(r.rsync_target).rstrip("/") + "/")
        ),
        None,
    )


def reach(settings: Settings, database: Database, area: str) -> Reach:
    if PLACEHOLDER not in area:
        return Reach(area, "", "", True)
    region = region_of(settings, area)
    if region is None:
        raise StagingError(f"{area}: no [[staging.regions]] rsync_target holds this area")
    provider = settings.provider(region.provider)
    name = director_name(provider.name, provider.region)
    with database.session() as session:
        director = find(session, name)
        state = director.state if director else "not launched"
        address = director.private_address if director else None
    if director is None or DirectorState(state) not in SERVING or not address:
        return Reach(area, name, state, False)
    return Reach(area.replace(PLACEHOLDER, address), name, state, True, address)


def resolve(settings: Settings, database: Database, area: str) -> str:
    """`area` with `{director}` replaced by the region's READY director's address."""
    found = reach(settings, database, area)
    if not found.ready:
        raise StagingError(
            f"director {found.director} is {found.state}: its staging area is not reachable; "
            "the transfer can run again once it is READY (clustermgr directors list)"
        )
    return found.area


def staging_demand(settings: Settings, database: Database) -> set[str]:
    """Providers whose director a waiting transfer needs (demand for the lifecycle)."""
    with database.session() as session:
        waiting = session.scalars(select(Transfer.stage_dir).where(Transfer.state == WAITING)).all()
    regions = (region_of(settings, area) for area in waiting)
    return {region.provider for region in regions if region is not None}

"""The director syncs' queue: the lifecycle's pass only queues (and wakes the job), a
director whose sync is under way is not queued twice, the job drains the queue one director
at a time, and inline mode syncs at once and raises what failed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from clustermgr.config import parse_settings
from clustermgr.core.errors import ClusterMgrError
from clustermgr.db.database import Database
from clustermgr.directors.health import DirectorInfo
from clustermgr.directors.states import DirectorState
from clustermgr.runtime.director_sync import DirectorSync, SyncSummary


def info(name: str) -> DirectorInfo:
    return DirectorInfo(1, name, "p", "r", DirectorState.SYNCING, private_address="10.0.0.2")


class Recording(DirectorSync):
    """The real queue; the sync itself recorded instead of run (no director to reach)."""

    def __init__(self, tmp_path: Path, **kwargs: object) -> None:
        db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
        super().__init__(parse_settings({}), db, **kwargs)  # type: ignore[arg-type]
        self.synced: list[str] = []
        self.during: threading.Event | None = None
        self.fail = False

    def sync_director(self, director: DirectorInfo) -> SyncSummary:
        if self.during is not None:
            self.during.set()
            self.sync(director)  # the pass asks again while it runs: not queued twice
        self.synced.append(director.name)
        done = SyncSummary()
        done.add(f"{director.name}: synced", ok=not self.fail)
        return done


def test_the_pass_queues_and_wakes_the_job_drains(tmp_path: Path) -> None:
    woken: list[bool] = []
    syncer = Recording(tmp_path, wake=lambda: woken.append(True))
    syncer.sync(info("director-b"))
    syncer.sync(info("director-a"))
    syncer.sync(info("director-a"))
    assert syncer.synced == [] and syncer.queued() == ["director-a", "director-b"]
    assert woken == [True, True, True]
    syncer.during = threading.Event()
    assert syncer.run_queued() == ["director-a: synced", "director-b: synced"]
    assert syncer.synced == ["director-a", "director-b"] and syncer.queued() == []


def test_inline_syncs_at_once_and_raises_what_failed(tmp_path: Path) -> None:
    syncer = Recording(tmp_path, inline=True)
    syncer.sync(info("director-a"))
    assert syncer.synced == ["director-a"] and syncer.queued() == []
    syncer.fail = True
    with pytest.raises(ClusterMgrError, match="director-a: synced"):
        syncer.sync(info("director-a"))

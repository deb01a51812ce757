"""Bringing the directors' replicas in sync: the image sync (imaging/replication.py) and
the LDAP sync (ldap/sync.py), per director, as the lifecycle's `Syncer` and as cm-scale's scheduled
job.

A sync can take minutes (a large image tree, a slow WAN), so cm-scale never runs one inside
a scale cycle: the lifecycle's pass only *queues* a SYNCING director (`DirectorSync.sync`
returns at once) and wakes the daemon's `director-sync` job, which runs the queued syncs one
director at a time under the sync lock on APScheduler's thread pool, while scale cycles go
on. The next pass's health check reads the replica tables the syncs wrote and moves the
director to READY. Every `[images] sync_interval_s` the same job syncs every serving director
(`sync_scheduled`: a new revision of each changed image tree, which is sent at once, the
machine-image copies, and the LDAP replicas). Each run of the job also makes the machine-image
uploads a scale cycle requested for a waiting launch (`uploads`: OpenStack Glance copies,
which move the whole image through the head; a failed one is tried again after
`[images] sync_interval_s`). All run on the leader only.

`cm-scale --once` and the tests build it with `inline=True`: `sync` then runs the director's
syncs at once (the one cycle waits for them) and raises when one failed, which the pass
records in the director's health line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import select

from clustermgr.config import Settings
from clustermgr.core.errors import ClusterMgrError
from clustermgr.core.inputs import usable_address
from clustermgr.db.database import Database
from clustermgr.db.models import Director
from clustermgr.directors.health import DirectorInfo, PortsAndReplicas, Syncer
from clustermgr.directors.lifecycle import DirectorLifecycle
from clustermgr.imaging import machine_images, replication
from clustermgr.providers.base import Provider
from clustermgr.staging.director import staging_demand

if TYPE_CHECKING:
    from clustermgr.imaging.definitions import LoadedImage
    from clustermgr.ldap import sync as ldap_sync

log = logging.getLogger(__name__)


@dataclass
class SyncSummary:
    """One director's (or the scheduled run's) syncs, as lines for the log."""

    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def add(self, line: str, ok: bool) -> None:
        self.lines.append(line)
        if not ok:
            self.failures.append(line)


class DirectorSync:
    """The lifecycle's Syncer: queues a director (or, inline, syncs it at once)."""

    def __init__(
        self,
        settings: Settings,
        database: Database,
        *,
        wake: Callable[[], None] | None = None,
        inline: bool = False,
    ) -> None:
        self.settings = settings
        self.db = database
        self.wake = wake
        self.inline = inline
        # the definitions the templates name (the engine's, read with the configuration)
        self.images: Mapping[str, LoadedImage] = {}
        self._queued: dict[str, DirectorInfo] = {}
        self._running: set[str] = set()
        self._mutex = threading.Lock()  # the queue
        self._work = threading.Lock()  # one sync run at a time

    # --- the Syncer side (the lifecycle's pass) ------------------------------------------

    def sync(self, director: DirectorInfo) -> None:
        if self.inline:
            with self._work:
                done = self.sync_director(director)
            for line in done.lines:
                log.info("director sync: %s", line)
            if not done.ok:
                raise ClusterMgrError("; ".join(done.failures))
            return
        with self._mutex:
            if director.name in self._running:
                return  # its sync is under way; the pass after it sees the outcome
            self._queued[director.name] = director
        if self.wake is not None:
            self.wake()

    def queued(self) -> list[str]:
        with self._mutex:
            return sorted(self._queued)

    # --- the job side --------------------------------------------------------------------

    def run_queued(self) -> list[str]:
        """Sync every queued director, one at a time (the daemon's job), then make the
        machine-image uploads that are due; log lines."""
        lines: list[str] = []
        with self._work:
            while True:
                with self._mutex:
                    if not self._queued:
                        return lines + self._uploads()
                    name = min(self._queued)
                    director = self._queued.pop(name)
                    self._running.add(name)
                try:
                    lines += self.sync_director(director).lines
                finally:
                    with self._mutex:
                        self._running.discard(name)

    def sync_director(self, director: DirectorInfo) -> SyncSummary:
        """The images its READY needs (every image when it names none) and its LDAP
        replica, each recorded in the replica tables."""
        done = SyncSummary()
        spec = self.settings.director(director.provider)
        names = list(spec.images) if spec is not None and spec.images else [None]
        for image in names:
            self._images(done, image=image, director=director.name, machine_images=False)
        if self.settings.ldap is not None and director.private_address:
            from clustermgr.ldap import sync as ldap_sync  # ldap3: only where LDAP is set up

            target = ldap_sync.DirectorTarget(director.id, director.name, director.private_address)
            self._ldap(done, target)
        return done

    def sync_scheduled(self) -> list[str]:
        """Every serving director: new image revisions sent and verified, machine images
        copied, LDAP replicas synced ([images] sync_interval_s); log lines."""
        done = SyncSummary()
        with self._work:
            self._images(done)
            if self.settings.ldap is not None:
                for target in self._serving_targets():
                    self._ldap(done, target)
        return done.lines

    def _uploads(self) -> list[str]:
        """The uploads (OpenStack Glance copies) requested by waiting launches or failed
        longer than a sync interval ago, made one after the other."""
        if not self.images:
            return []
        try:
            rows = machine_images.upload_requested(
                self.db, self.settings, self.images, self.settings.images.sync_interval_s
            )
        except ClusterMgrError as exc:
            return [f"machine-image uploads: {exc}"]
        lines = []
        for row in rows:
            error = f" ({row.error})" if row.error else ""
            lines.append(f"machine image {row.image} to {row.region}: {row.state}{error}")
        return lines

    def _serving_targets(self) -> list[ldap_sync.DirectorTarget]:
        from clustermgr.ldap import sync as ldap_sync

        with self.db.session() as session:
            rows = session.scalars(select(Director).order_by(Director.name)).all()
            synced = {state.value for state in replication.SYNCED_STATES}  # unknown: not synced
            serving = (r for r in rows if r.state in synced)
            found = ((r, usable_address(r.private_address, f"director {r.name}")) for r in serving)
            return [ldap_sync.DirectorTarget(r.id, r.name, a) for r, a in found if a]

    def _images(
        self,
        done: SyncSummary,
        *,
        image: str | None = None,
        director: str | None = None,
        machine_images: bool = True,
    ) -> None:
        try:
            report = replication.sync_all(
                self.db,
                self.settings,
                image=image,
                director=director,
                machine_images=machine_images,
            )
        except (ClusterMgrError, OSError) as exc:
            done.add(f"images{f' {image}' if image else ''}: {exc}", ok=False)
            return
        for error in report.errors:
            done.add(error, ok=False)
        for replica in report.replicas:
            line = f"image {replica.image} {replica.version} to {replica.director}: "
            line += replica.state.value + (f" ({replica.error})" if replica.error else "")
            done.add(line, ok=replica.state is replication.ReplicaState.VERIFIED)

    def _ldap(self, done: SyncSummary, target: ldap_sync.DirectorTarget) -> None:
        assert self.settings.ldap is not None
        from clustermgr.ldap import sync as ldap_sync

        try:
            outcome = ldap_sync.sync_director(self.db, self.settings.ldap, target)
        except ClusterMgrError as exc:
            done.add(f"ldap {target.name}: {exc}", ok=False)
            return
        done.add(f"ldap {outcome.summary()}", ok=outcome.state == "ok")


def director_pass(
    settings: Settings,
    database: Database,
    provider_of: Callable[[str], Provider],
    syncers: Sequence[Syncer],
    demand: Collection[str],
    actor: str,
) -> str:
    """One pass of the director lifecycle with the default health check (what cm-scale and
    `cm-scale --once` run after a cycle); its summary."""
    lifecycle = DirectorLifecycle(
        settings,
        database,
        provider_of,
        PortsAndReplicas(settings, database),
        syncers=syncers,
        actor=actor,
    )
    try:
        done = lifecycle.run({*demand, *staging_demand(settings, database)})
    except ClusterMgrError as exc:
        log.warning("director pass failed: %s", exc)
        return f"failed: {exc}"
    for line in done.moves + done.errors:
        log.info("director %s", line)
    return done.summary()

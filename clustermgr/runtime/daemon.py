"""The cm-scale service: APScheduler jobs, leadership, signals, heartbeat, sd_notify.

- `scale` runs the full cycle every [daemon] interval_s, earlier when a hook pokes the
  socket, then the director lifecycle's pass (with the cycle's demand; [[directors]]);
  `director-sync` runs the image and LDAP syncs the pass queued for SYNCING directors, and
  every [images] sync_interval_s those of every serving director, outside the scale lock
  (runtime/director_sync.py): a long rsync never holds up a cycle;
  `reconcile` runs observe + reconcile only; `catalog` refreshes instance types.
  Jobs never overlap (one lock), so SIGTERM waits for the step in progress and exits:
  a plan is never left half-applied.
- Only the leader acts: it holds the lease (runtime/leader.py), renewed by the heartbeat
  and before every act step (Engine.guard); every write of the cycle and the jobs goes
  through the fenced database view, so a leader that lost the lease writes nothing.
- A database fault is one line per cycle or job, never a scheduler traceback; what happens
  to the pair (takeover, lost lease, outage, reload, config change) is a cluster event.
- SIGHUP reloads the config; an invalid file is refused with one line and the old kept.
- The heartbeat (file + database row) lets the hooks and `clustermgr status` see us; it
  runs on its own schedule, so a long cycle does not make the daemon look dead.
- systemd's watchdog is fed by its own thread while the running cycle makes progress
  (clustermgr/runtime/watchdog.py): a cycle stuck in a call is restarted, a long busy one is not.
- A step of the wall clock moves every running timer with it (scaling/clockstep.py) and
  re-arms the scheduler, which plans by the wall clock.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from clustermgr.config import Settings, load_settings
from clustermgr.config.exposure import exposed_secret_files
from clustermgr.core.errors import ClusterMgrError, DatabaseError, ErrorKind
from clustermgr.core.pricing import price_of
from clustermgr.core.progress_marks import PROGRESS
from clustermgr.db.database import Database, describe_db_error
from clustermgr.db.models import DaemonStatus, Node
from clustermgr.mungekey.server import KeyServer, start_key_server
from clustermgr.nodes.states import ACTIVE_CLOUD_STATES
from clustermgr.policy.fit import BurstDemand, burst_demand
from clustermgr.runtime import sdnotify
from clustermgr.runtime.director_sync import DirectorSync, director_pass
from clustermgr.runtime.leader import LeaseLostError, make_lock
from clustermgr.runtime.metrics import Metrics
from clustermgr.runtime.pair import (
    LEASE_LOST,
    RELOAD,
    RELOAD_REFUSED,
    TAKEOVER,
    PairLog,
    config_digest,
)
from clustermgr.runtime.statedir import (
    LEADER_DIR,
    SOCKET_MODE,
    StateOwners,
    keep_journal_open,
    prepare_state_dir,
    write_heartbeat,
)
from clustermgr.runtime.watchdog import Watchdog, stall_limit_warnings
from clustermgr.scaling.clockstep import ClockWatch, shift_timers
from clustermgr.scaling.engine import CycleReport, Engine
from clustermgr.staging.service import start_if_configured as start_staging_service
from clustermgr.workload.hooks import SOCKET

log = logging.getLogger("cm-scale")
DIRECTOR_SYNC_POLL_S = 10.0
# Pokes are coalesced: one early cycle at most every POKE_MIN_GAP_S, however many arrive
# (a poke inside the gap is remembered and wakes the cycle when the gap ends).
POKE_MIN_GAP_S = 2.0


class Daemon:
    def __init__(self, config_path: Path, settings: Settings, database: Database):
        self.config_path = config_path
        self.settings = settings
        self.db = database
        self.status_id = f"{socket.gethostname()}:{os.getpid()}"
        self.actor = f"cm-scale@{self.status_id}"
        self.lock = make_lock(database, self.actor, settings.daemon.lease_s, self.state_dir)
        self.fenced_db = database.fenced(self.lock.fence)  # every write the leader makes
        self.pair = PairLog(database, self.actor)
        self.engine = Engine(settings, self.fenced_db, actor=self.actor)
        self.metrics = Metrics()
        self.metrics_port: int | None = None
        self.key_server: KeyServer | None = None  # the munge key to booting nodes
        self.role = "standby"
        self.work_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.reload_event = threading.Event()
        self.last_report: CycleReport | None = None
        self.demand: BurstDemand | None = None  # the last cycle's burst demand
        self.cycles_failed = 0  # since this process started
        self.cycles_failed_in_row = 0  # since its last good cycle
        self.config_digest = config_digest(config_path)  # the file as loaded (reloads too)
        self.config_loaded_at = datetime.now(UTC)
        self.current_hourly_cost = 0.0  # set once per cycle, read by the heartbeat
        self.standby_until = 0.0  # after losing leadership, let a standby take over
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.director_sync = DirectorSync(settings, self.fenced_db, wake=self._wake_director_sync)
        self.director_sync.images = self.engine.images
        self.last_scheduled_sync = 0.0  # time.monotonic() of the last full director sync
        self.clock = ClockWatch()
        self.unshifted_step_s = 0.0  # a clock step whose timers could not be moved yet
        self.watchdog = Watchdog.for_systemd(settings.daemon.stall_timeout_s)
        self.beat_lock = threading.Lock()  # the heartbeat job and a cycle's end share a file
        self.owners: StateOwners | None = None  # set by run(), which makes the layout
        self.standby_reported = False  # "another holds the lease" is said once per standby
        self.role_lock = threading.Lock()  # the heartbeat and a cycle may both see a loss
        self.acting = False  # a cycle's engine runs: its Slurm and cloud calls are gated
        PROGRESS.gate = self._gate

    @property
    def state_dir(self) -> Path:
        return self.settings.daemon.state_dir

    # --- lifecycle -----------------------------------------------------------------------

    def run(self) -> int:
        d = self.settings.daemon
        self.owners = prepare_state_dir(
            d.state_dir, self.settings.slurm.user, d.admin_group, self.db.url
        )
        journal = keep_journal_open(self.db.url)
        self.metrics.prime(
            [(t.name, t.provider) for t in self.settings.templates],
            [*(k.value for k in ErrorKind), "CYCLE", "VANISHED", "BOOT_TIMEOUT", "HEALTH"],
        )
        if self.settings.daemon.metrics_port:
            self.metrics_port = self.metrics.serve(
                self.settings.daemon.metrics_address, self.settings.daemon.metrics_port
            )
        self.key_server = start_key_server(self.settings, self.db)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)
        self._schedule()
        self.scheduler.start()
        waker = threading.Thread(target=self._listen_for_pokes, name="wake", daemon=True)
        waker.start()
        staging = start_staging_service(self.settings, self.db)  # cmsub's channel (root)
        sdnotify.ready(f"started as {self.role}")
        self.watchdog.start()
        self.heartbeat()
        log.info("cm-scale started (pid %d, %s)", os.getpid(), self.status_id)
        self.pair.config_seen(self.config_path, "configuration at start")
        for warning in exposed_secret_files(self.settings, self.config_path):
            log.warning("%s", warning.removeprefix("warning: "))
        for warning in stall_limit_warnings(self.settings):
            log.warning("%s", warning)
        while not self.stop_event.is_set():
            self.stop_event.wait(0.5)
            with PROGRESS.running("the clock check"), self.work_lock:
                self._follow_clock_step(move_timers=False)  # re-arm at once, move in a cycle
            if self.reload_event.is_set():
                self.reload_event.clear()
                self.reload()
        sdnotify.stopping()
        log.info("stopping: waiting for the step in progress")
        self.scheduler.shutdown(wait=True)
        if staging is not None:
            staging.stop()
        with self.work_lock:  # a job that started just before shutdown
            pass
        self.watchdog.stop()
        self.role = "stopped"
        self.heartbeat()
        self.lock.release()
        if self.key_server is not None:
            self.key_server.shutdown()
            self.key_server.server_close()
        (self.state_dir / SOCKET).unlink(missing_ok=True)
        self.db.dispose()  # the last connection out checkpoints the WAL into the file
        if journal is not None:
            journal.close()
        log.info("stopped cleanly")
        return 0

    def _schedule(self) -> None:
        """(Re-)arm every periodic job (at start, on a reload, on a step of the clock): the
        scale cycle at once, each other job at its next run already planned, or one period
        from now when none is planned within a period (never next_run_time=None, which
        APScheduler 3 takes as paused: the job would never run)."""
        d = self.settings.daemon
        now = datetime.now(UTC)
        jobs: list[tuple[str, Callable[[], None], float]] = [
            ("scale", self.scale_job, d.interval_s),
            ("reconcile", self.reconcile_job, d.reconcile_interval_s),
            ("catalog", self.catalog_job, d.catalog_refresh_s),
            ("prune", self.prune_job, self.settings.database.prune_interval_s),
            ("heartbeat", self.heartbeat, min(5.0, d.interval_s / 2)),
        ]
        if self.settings.directors or self.engine.images:
            # queued syncs are picked up at once (woken by the pass) or within this period,
            # as are machine-image uploads a cycle requested
            jobs.append(("director-sync", self.director_sync_job, DIRECTOR_SYNC_POLL_S))
        elif self.scheduler.get_job("director-sync") is not None:  # reloaded without directors
            self.scheduler.remove_job("director-sync")
        for job_id, func, seconds in jobs:
            self.scheduler.add_job(
                func,
                "interval",
                seconds=seconds,
                id=job_id,
                max_instances=1,
                coalesce=True,
                next_run_time=now if job_id == "scale" else self._next_run(job_id, now, seconds),
                replace_existing=True,
                misfire_grace_time=None,
            )

    def _next_run(self, job_id: str, now: datetime, seconds: float) -> datetime:
        """A re-armed job keeps its planned run when that is within one period (so frequent
        reloads never starve an hourly job); one planned in the past (the clock stepped
        forward) runs now; one too far ahead (the clock stepped back) moves to a period
        from now."""
        job = self.scheduler.get_job(job_id)
        planned: datetime | None = getattr(job, "next_run_time", None)
        period = timedelta(seconds=seconds)
        if planned is None or planned > now + period:
            return now + period
        return max(planned, now)

    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_event.set()

    def _on_reload(self, signum: int, _frame: FrameType | None) -> None:
        self.reload_event.set()

    def reload(self) -> None:
        try:
            settings = load_settings(self.config_path)
            engine = Engine(settings, self.fenced_db, actor=self.actor)
        except ClusterMgrError as exc:
            log.error("reload refused, keeping the running config: %s", exc)
            sdnotify.status(f"reload refused: {exc}")
            self.pair.record(RELOAD, f"{RELOAD_REFUSED}, the running config kept: {exc}")
            return
        with PROGRESS.running("the reload"), self.work_lock:
            self.settings = settings
            self.engine = engine
            self.director_sync.settings = settings
            self.director_sync.images = engine.images
            self.watchdog.stall_limit_s = settings.daemon.stall_timeout_s
            self._schedule()
            self.config_digest = config_digest(self.config_path)
            self.config_loaded_at = datetime.now(UTC)
        log.info("configuration reloaded from %s", self.config_path)
        self.pair.record(RELOAD, f"configuration reloaded from {self.config_path}")
        self.pair.config_seen(self.config_path, "configuration reloaded")

    def _listen_for_pokes(self) -> None:
        """The hooks' wake-up socket: root:<SlurmUser's group> 0660 (made in the root-only
        leader directory, then renamed into place, so it is never reachable looser)."""
        assert self.owners is not None
        path = self.state_dir / SOCKET
        staging = self.state_dir / LEADER_DIR / ".sock"  # no longer than the final path
        staging.unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            try:
                sock.bind(str(staging))
            except OSError as exc:  # a path over AF_UNIX's 108 bytes, say
                log.error("hooks cannot wake the daemon: cannot bind %s: %s", staging, exc)
                return
            if os.geteuid() == 0:
                os.chown(staging, 0, self.owners.slurm_gid)
            staging.chmod(SOCKET_MODE)
            os.replace(staging, path)
            sock.settimeout(1.0)
            last_wake = 0.0
            pending = False
            while not self.stop_event.is_set():
                try:
                    sock.recv(64)
                    pending = True
                except TimeoutError:
                    pass
                except OSError:
                    return
                if pending and time.monotonic() - last_wake >= POKE_MIN_GAP_S:
                    pending = False
                    last_wake = time.monotonic()
                    self._wake_scale()
                elif pending:
                    sock.settimeout(max(0.05, last_wake + POKE_MIN_GAP_S - time.monotonic()))
                    continue
                sock.settimeout(1.0)

    def _wake_scale(self) -> None:
        job = self.scheduler.get_job("scale")
        if job is not None:
            job.modify(next_run_time=datetime.now(UTC))

    # --- jobs ----------------------------------------------------------------------------

    def _lead(self) -> bool:
        was = self.role
        if was == "leader" and not self.lock.still_leader():
            self._lost_lease()
        if time.monotonic() < self.standby_until:
            self.role = "standby"
        elif self.lock.try_acquire():
            self.role = "leader"
            self.standby_reported = False
            if was != "leader":
                self._took_lease()
        else:
            self.role = "standby"
            if self.lock.unreachable is not None:
                self.pair.database_fault(self.lock.unreachable)
            elif not self.standby_reported:
                self.standby_reported = True
                log.warning("standing by: the leader lease is held by %s", self.lock.holder())
        if self.lock.unreachable is None:
            self.pair.database_reached()
        if self.role != was:
            log.info("now %s", self.role)
        self.metrics.leader.set(1 if self.role == "leader" else 0)
        return self.role == "leader"

    def _took_lease(self) -> None:
        before = self.lock.took_from
        if before is not None and before.holder and before.holder != self.actor:
            how = (
                "ran out" if before.expires_in_s <= 0 else "was freed (its holder's session ended)"
            )
            message = (
                f"took the leader lease (generation {self.lock.generation}) from "
                f"{before.holder}, whose lease {how}"
            )
        else:
            message = f"took the leader lease (generation {self.lock.generation})"
        log.warning("%s", message)
        self.pair.record(TAKEOVER, message)

    def _lost_lease(self) -> None:
        """The lease is not ours any more (taken over, run out, database away): stand by
        for a few cycles, so a standby takes over instead of both racing for it."""
        with self.role_lock:
            if self.role != "leader":
                return
            self.role = "standby"
            self.standby_until = time.monotonic() + 3 * self.settings.daemon.interval_s
        message = f"lost the leader lease: {self.lock.lost_why}; standing by"
        log.warning("%s", message)
        if self.lock.unreachable is not None:
            self.pair.database_fault(self.lock.unreachable)
        else:
            self.pair.record(LEASE_LOST, message)

    def scale_job(self) -> None:
        self._one_line(lambda: self._run_cycle(decide=True), "cycle")

    def reconcile_job(self) -> None:
        self._one_line(lambda: self._run_cycle(decide=False), "reconcile")

    def _one_line(self, job: Callable[[], None], what: str) -> None:
        """A job that meets a database fault (or any error of ours) says it in one line,
        never in a scheduler traceback; the database's first fault of an outage is the one
        said by every job after the cycle."""
        try:
            job()
        except LeaseLostError as exc:  # the fence refused a write: the guard says so next
            self._count_cycle(what, ok=False)
            log.error("%s failed: %s", what, exc)
        except DatabaseError as exc:
            self._count_cycle(what, ok=False)
            self._database_fault(what, str(exc))
        except SQLAlchemyError as exc:
            self._count_cycle(what, ok=False)
            self._database_fault(what, str(describe_db_error(self.db.url, exc)))
        except ClusterMgrError as exc:
            self._count_cycle(what, ok=False)
            log.error("%s failed: %s", what, exc)

    def _count_cycle(self, what: str, ok: bool) -> None:
        """A cycle's (or reconcile's) outcome in the counts the heartbeat records."""
        if what not in ("cycle", "reconcile"):
            return
        if ok:
            self.cycles_failed_in_row = 0
        else:
            self.cycles_failed += 1
            self.cycles_failed_in_row += 1

    def _database_fault(self, what: str, line: str) -> None:
        if self.pair.database_fault(line) or what in ("cycle", "reconcile"):
            log.error("%s failed: %s", what, line)

    def _run_cycle(self, decide: bool) -> None:
        if self.stop_event.is_set():
            return
        with PROGRESS.running("scale cycle" if decide else "reconcile"), self.work_lock:
            PROGRESS.step("the leader check")
            self._follow_clock_step()  # before any timer is judged
            if not self._lead():
                return
            self.engine.guard = self._still_leader
            self.acting = True
            try:
                report = self.engine.cycle(decide=decide)
            finally:
                self.acting = False
            if decide and self.settings.directors and self._still_leader():
                PROGRESS.step("the director pass")
                report.directors = self.run_directors(report)
            PROGRESS.step("the cycle's metrics")
            self.last_report = report
            if report.view is not None:
                self.demand = burst_demand(report.view)
            self.metrics.observe_cycle(report, self.demand)
            try:
                self._observe_nodes()
            except DatabaseError:
                if report.error is None:
                    raise  # else the cycle's line said it
            what = "cycle" if decide else "reconcile"
            self._count_cycle(what, ok=report.error is None)
            if report.error is None:
                log.info("%s: %s (%.2f s)", what, report.summary(), report.duration_s)
            else:  # what monitoring and an admin reading the journal must not miss
                log.error(
                    "%s: %s (%.2f s; %d failed in a row, %d since start)",
                    what,
                    report.summary(),
                    report.duration_s,
                    self.cycles_failed_in_row,
                    self.cycles_failed,
                )
            sdnotify.status(f"{self.role}: {report.summary()}")
        self.heartbeat()

    def _still_leader(self) -> bool:
        """The guard before every act step and every launch: the lease renewed, one round
        trip; a loss is said and recorded at once."""
        if self.role == "leader" and self.lock.still_leader():
            return True
        self._lost_lease()
        return False

    def _gate(self, what: str) -> None:
        """Before each Slurm command and cloud call of a cycle (progress marks): refused
        once the lease may have run out, by this process's clock, with no round trip: a
        leader frozen mid-launch sends nothing after it wakes."""
        if self.acting and not self.lock.valid_locally():
            raise LeaseLostError(
                f"{what} not done: the leader lease of {self.actor} ran out or was lost"
            )

    def _follow_clock_step(self, move_timers: bool = True) -> None:
        """On a step of the wall clock (scaling/clockstep.py) the scheduler, which plans by
        the wall clock, is re-armed at once, and the leader moves every running timer by
        it before its next cycle judges one (a failed move is retried by the next cycle,
        not every half second). Called with the work lock held."""
        step = self.clock.step()
        if step is not None:
            self.unshifted_step_s += step
            self._schedule()
        if not self.unshifted_step_s or not move_timers:
            return
        if self.role != "leader" or not self._still_leader():
            log.warning(
                "the wall clock stepped by %.0f s; standing by, the leader moves the timers",
                self.unshifted_step_s,
            )
            self.unshifted_step_s = 0.0
            return
        try:
            report = shift_timers(self.fenced_db, self.settings, self.unshifted_step_s)
        except (ClusterMgrError, SQLAlchemyError) as exc:
            log.error("the wall clock stepped; timers not moved yet, will retry: %s", exc)
            return
        self.unshifted_step_s = 0.0
        log.warning("%s", report.line())
        sdnotify.status(f"{self.role}: {report.line()}")

    def run_directors(self, report: CycleReport) -> str:
        """The director lifecycle's pass, after the cycle (it reads the cycle's demand);
        the syncs it asks for run in the director-sync job."""
        return director_pass(
            self.settings,
            self.fenced_db,
            self.engine.provider,
            [self.director_sync],
            report.demand,
            self.actor,
        )

    def _wake_director_sync(self) -> None:
        job = self.scheduler.get_job("director-sync")
        if job is not None:
            job.modify(next_run_time=datetime.now(UTC))

    def director_sync_job(self) -> None:
        self._one_line(self._director_sync, "director sync")

    def _director_sync(self) -> None:
        """The syncs the lifecycle queued and the machine-image uploads cycles requested,
        then, every [images] sync_interval_s, the syncs of every serving director. Leader
        only; never under the scale lock."""
        if self.stop_event.is_set() or self.role != "leader" or not self._still_leader():
            return
        with PROGRESS.quiet():  # a long rsync is not the cycle's progress, nor its stall
            lines = self.director_sync.run_queued()
            due = self.last_scheduled_sync + self.settings.images.sync_interval_s
            if self.settings.directors and time.monotonic() >= due:
                self.last_scheduled_sync = time.monotonic()
                lines += self.director_sync.sync_scheduled()
        for line in lines:
            log.info("director sync: %s", line)

    def catalog_job(self) -> None:
        self._one_line(self._catalog, "catalog refresh")

    def _catalog(self) -> None:
        from clustermgr.providers.catalog import store_catalog
        from clustermgr.providers.reservations import refresh_reservations

        with PROGRESS.running("catalog refresh"), self.work_lock:
            if self.role != "leader":
                return
            for name in sorted({t.provider for t in self.settings.templates}):
                PROGRESS.step(f"the catalog of {name}")
                try:
                    provider = self.engine.provider(name)
                    types = provider.catalog()
                    with self.fenced_db.session() as session:
                        store_catalog(session, self.settings, name, types)
                    with self.fenced_db.session() as session:  # kept if this fails
                        refresh_reservations(session, self.settings, name, provider)
                except ClusterMgrError as exc:
                    log.warning("catalog refresh of %s failed: %s", name, exc)

    def prune_job(self) -> None:
        self._one_line(self._prune, "database prune")

    def _prune(self) -> None:
        from clustermgr.db.retention import prune

        with PROGRESS.running("database prune"), self.work_lock:
            if self.role != "leader":
                return
            days = self.settings.database.retention_days
            try:
                pruned = prune(self.fenced_db, days, datetime.now(UTC))
            except ClusterMgrError as exc:
                log.warning("database prune failed: %s", exc)
                return
            log.info("database prune: older than %g days: %s", days, pruned.summary())

    def _observe_nodes(self) -> None:
        counts: Counter[tuple[str, str, str]] = Counter()
        with self.db.session() as session:
            for state, template, provider in session.execute(
                select(Node.state, Node.template, Node.provider).where(Node.kind == "cloud")
            ):
                counts[(state, template or "", provider or "")] += 1
        self.metrics.observe_nodes(counts)
        self.current_hourly_cost = self.hourly_cost()
        self.metrics.hourly_cost.set(self.current_hourly_cost)

    def hourly_cost(self) -> float:
        """$/hour of every cloud node holding an instance now (the one pricing function)."""
        total = 0.0
        with self.db.session() as session:
            rows = session.execute(
                select(Node.template, Node.instance_type, Node.market).where(
                    Node.state.in_([s.value for s in ACTIVE_CLOUD_STATES])
                )
            )
            for template_name, itype, market in rows:
                try:
                    template = self.settings.template(template_name or "")
                except ClusterMgrError:
                    continue
                total += price_of(template.price_table, template.instance_types, itype, market)
        return total

    def heartbeat(self) -> None:
        """The heartbeat job (and the end of every cycle): the file the hooks read and the
        row `clustermgr status` reads, each naming a stall while one holds the watchdog."""
        with PROGRESS.quiet(), self.beat_lock:  # its commit is not the cycle's progress
            if self.role == "leader" and not self.lock.still_leader():  # the renewal
                self._lost_lease()
            self._one_line(self._beat, "heartbeat")

    def _beat(self) -> None:
        now = datetime.now(UTC)
        report = self.last_report
        stall = self.watchdog.stalled
        beat: dict[str, object] = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "role": self.role,
            "at": now.isoformat(),
            **({"stalled": stall.line()} if stall else {}),
        }
        try:
            write_heartbeat(self.state_dir, beat, self.owners)
        except OSError as exc:  # disk full, say: the database row below still says we live
            log.warning("heartbeat file not written in %s: %s", self.state_dir, exc.strerror)
        try:
            with self.db.session() as session:
                row = session.get(DaemonStatus, self.status_id) or DaemonStatus(
                    id=self.status_id, host=beat["host"], pid=os.getpid(), started_at=now
                )
                row.role = self.role
                row.heartbeat_at = now
                if report is not None:
                    row.last_cycle_at = report.started
                    row.last_cycle_ok = report.error is None
                    row.last_cycle_summary = report.summary()[:1000]
                    row.last_cycle_duration_s = report.duration_s
                if stall is not None:
                    before = f"; the cycle before: {report.summary()}" if report else ""
                    row.last_cycle_summary = f"{stall.line()}{before}"[:1000]
                if self.demand is not None:
                    row.pending_jobs = self.demand.jobs
                    row.pending_gpus = self.demand.gpus
                row.hourly_cost = self.current_hourly_cost
                row.cycles_failed = self.cycles_failed
                row.cycles_failed_in_row = self.cycles_failed_in_row
                row.config_path = str(self.config_path)
                row.config_digest = self.config_digest
                row.config_loaded_at = self.config_loaded_at
                session.add(row)
        except ClusterMgrError as exc:
            if self.pair.database_fault(str(exc)):
                log.warning("heartbeat not recorded in the database: %s", exc)
            return
        self.pair.database_reached()

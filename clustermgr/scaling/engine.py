"""One scaling cycle: observe -> reconcile (verdicts) -> decide -> clamp -> act.

Observe takes one snapshot; if Slurm cannot be read the cycle acts on nothing and says so
in one line; a provider that cannot be listed is left alone (its nodes are judged next
cycle). A dry run is the same path with act switched off, so it prints what a cycle would do.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from clustermgr.config import Settings
from clustermgr.core import progress_marks
from clustermgr.core.errors import ClusterMgrError, ProviderError, WorkloadError
from clustermgr.db.database import Database
from clustermgr.db.ownership import issued
from clustermgr.directors.gate import read_gate
from clustermgr.imaging.launch_images import (
    RegionImage,
    image_waits,
    region_images,
    template_definitions,
)
from clustermgr.imaging.machine_images import start_copies
from clustermgr.policy.chain import PolicyRunner
from clustermgr.policy.loader import load_chain
from clustermgr.policy.view import ClusterView
from clustermgr.providers.base import CloudInstance, Provider
from clustermgr.providers.launch_groups import PlacementGroup, PlacementGroups
from clustermgr.providers.registry import make_provider
from clustermgr.scaling import act
from clustermgr.scaling.actor import Actor
from clustermgr.scaling.clamp import Plan
from clustermgr.scaling.decide import decide as decide_plan
from clustermgr.scaling.decide import judge
from clustermgr.scaling.directors import providers_in_demand, waiting_summary
from clustermgr.scaling.observe import (
    Snapshot,
    month_spend,
    read_nodes,
    read_ownership,
    recent_failures,
)
from clustermgr.scaling.onprem import onprem_providers
from clustermgr.scaling.protection import template_health
from clustermgr.scaling.reconcile import Judgment
from clustermgr.scaling.runs import RunTracker, rows
from clustermgr.scaling.specs import LaunchSpecs
from clustermgr.scaling.verdicts import Verdict
from clustermgr.workload.base import Workload
from clustermgr.workload.hooks import read_requests, reject_malformed, spool_writers
from clustermgr.workload.slurm import SlurmCli

log = logging.getLogger(__name__)
VERSION_TTL_S = 3600.0
# How a cycle that did nothing begins its summary, and the parts that say it did something
# after all when one follows at once (`summary` puts them first, in this order); a summary
# with a director's action in it did something too. `events --cluster` hides the rest.
IDLE_SUMMARY = "launched 0, stopped 0"
ACTED_PARTS = ("failed ", "registered ", "provider errors")
DIRECTORS_PART = "directors: "


@dataclass
class CycleReport:
    started: datetime
    duration_s: float = 0.0
    error: str | None = None
    plan: Plan | None = None
    judgment: Judgment | None = None
    acted: act.ActReport = field(default_factory=act.ActReport)
    provider_errors: dict[str, str] = field(default_factory=dict)
    view: ClusterView | None = None
    directors: str = ""  # what the director lifecycle did after the cycle, if anything
    copies: str = ""  # the machine-image copies launches wait for, as cm-scale left them
    slurm_nodes: int = 0  # the nodes Slurm listed in the cycle's snapshot

    @property
    def launched(self) -> list[str]:
        return self.acted.launched

    @property
    def failed(self) -> dict[str, str]:
        return self.acted.failed

    @property
    def stopped(self) -> list[str]:
        return self.acted.stopped

    def summary(self) -> str:
        if self.error:
            return f"cycle failed: {self.error}"
        parts = [f"launched {len(self.launched)}", f"stopped {len(self.stopped)}"]  # IDLE_SUMMARY
        if self.failed:
            parts.append(f"failed {len(self.failed)}")
        if self.acted.registered:
            parts.append(f"registered {len(self.acted.registered)}")
        if self.provider_errors:
            parts.append(f"provider errors: {', '.join(sorted(self.provider_errors))}")
        foreign = sum(len(f) for f in self.judgment.foreign.values()) if self.judgment else 0
        if foreign:
            parts.append(f"{foreign} foreign instances left alone (clustermgr status)")
        unfit = sum(len(f.jobs) for f in self.plan.jobs if f.status == "unfit") if self.plan else 0
        if unfit:
            parts.append(f"{unfit} pending jobs fit no template (clustermgr policy dry-run)")
        if self.acted.commented:
            parts.append(f"{self.acted.commented} jobs' verdicts written to their comments")
        parts += waiting_summary(self.view)
        if self.directors:
            parts.append(f"{DIRECTORS_PART}{self.directors}")
        if self.copies:
            parts.append(f"image copies: {self.copies}")
        return ", ".join(parts)

    @property
    def demand(self) -> frozenset[str]:
        """Providers whose region has burst demand (what the director lifecycle serves)."""
        return providers_in_demand(self.view, self.plan) if self.view is not None else frozenset()


class Engine:
    def __init__(
        self,
        settings: Settings,
        database: Database,
        workload: Workload | None = None,
        providers: Mapping[str, Provider] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        actor: str = "cm-scale",
    ):
        self.settings = settings
        self.db = database
        self.workload: Workload = workload or SlurmCli(
            settings.slurm.bin_dir, settings.slurm.command_timeout_s
        )
        self.providers: dict[str, Provider] = dict(providers or {})
        self.clock = clock
        self.actor_name = actor
        self.runner = PolicyRunner(
            load_chain(list(settings.policy.chain)), settings.policy.timeout_s
        )
        self.spool = settings.daemon.state_dir / "spool"
        self.spool_writers = spool_writers(settings.slurm.user)  # root and SlurmUser
        # Asked before every act step: a daemon that lost leadership must not act.
        self.guard: Callable[[], bool] = lambda: True
        self._version: tuple[float, str] | None = None  # (when read, slurmctld's version)
        # read with the configuration (a reload builds a new engine); ConfigError if bad
        self.images = template_definitions(settings)
        self.runs = RunTracker()  # the site's run-time history (job_runs), read at first

    def provider(self, name: str) -> Provider:
        if name not in self.providers:
            self.providers[name] = make_provider(
                self.settings.provider(name), self.settings.cluster.name
            )
        return self.providers[name]

    def cycle(self, dry_run: bool = False, decide: bool = True) -> CycleReport:
        """One cycle; `decide=False` observes and reconciles only."""
        start = time.monotonic()
        report = CycleReport(started=self.clock())
        try:
            self._cycle(report, dry_run, decide)
        except WorkloadError as exc:
            report.error = f"Slurm could not be read, nothing done: {exc}"
        except ClusterMgrError as exc:
            report.error = str(exc)
        report.duration_s = time.monotonic() - start
        if not dry_run:
            self._record("cycle", report.summary())
            for line in reject_malformed(self.spool, self.spool_writers):
                log.warning("%s", line)
                self._record("spool", line)
        return report

    # --- the cycle ---------------------------------------------------------------------

    def observe(self, report: CycleReport) -> Snapshot:
        workload = self.workload.snapshot()
        instances = self._list_instances(report)
        groups = self._list_placement_groups(instances)
        now = self.clock()
        with self.db.session() as session:
            rows = read_nodes(session)
            failures = recent_failures(session, now)
            spend = month_spend(session, now)
            health = template_health(session, self.settings, now)
            gate = read_gate(session, self.settings, instances)
            images = region_images(session, self.settings, self.images) if self.images else {}
            if not self.runs.loaded:
                self.runs.load(session)
            held = (
                {r.instance_id for r in rows.records.values() if r.instance_id}
                | rows.unreadable_instances
                | gate.instances
            )
            skip = onprem_providers(self.settings)
            ownership = read_ownership(session, instances, held, gate.requests, skip)
            group_requests = issued(
                session, {g.request_id for found in groups.values() for g in found}
            )
        return Snapshot(
            now=now,
            workload=workload,
            nodes=rows.records,
            instances=instances,
            provider_errors=dict(report.provider_errors),
            requests=read_requests(self.spool, self.spool_writers),
            failures=failures,
            month_spend=spend,
            protected={h.template: h.blocked for h in health if h.blocked},
            health={h.template: h for h in health},
            director_waits={**image_waits(images), **gate.waiting},  # the director first
            director_instances=gate.instances,
            director_requests=gate.requests,
            ownership=ownership,
            unreadable_instances=rows.unreadable_instances,
            controller_version=self.controller_version(),
            images=images,
            placement_groups=groups,
            group_requests=group_requests,
        )

    def _cycle(self, report: CycleReport, dry_run: bool, decide: bool) -> None:
        snapshot = self.observe(report)
        report.slurm_nodes = len(snapshot.workload.nodes)
        self._learn_runs(snapshot, record=not dry_run and self.guard())
        with snapshot_frozen():
            self._judge_decide_act(report, snapshot, dry_run, decide)
        if not dry_run and self.guard():
            report.copies = self._start_copies(snapshot.images)

    def _judge_decide_act(
        self, report: CycleReport, snapshot: Snapshot, dry_run: bool, decide: bool
    ) -> None:
        progress_marks.step("reconcile")
        judgment, view = judge(self.settings, snapshot)
        view = replace(view, run_history=self.runs.history)
        report.judgment = judgment
        plan = Plan()
        if decide:
            progress_marks.step("the policies")
            decided = decide_plan(self.settings, self.runner, view)
            view = report.view = decided.view
            if decided.error:
                report.error = f"{decided.error}; no scaling action this cycle"
                if not dry_run:
                    self._record("policy-error", decided.error)
            plan = decided.plan
            report.plan = plan
        if dry_run:
            return
        if not self.guard():
            report.error = "no longer the leader; nothing done"
            return
        actor = Actor(
            view.templates,
            self.db,
            self.workload,
            self._reachable(report),
            self.clock,
            LaunchSpecs(
                self.settings,
                self.clock,
                snapshot.controller_version,
                snapshot.images,
            ),
            self.actor_name,
            slurm_nodes=snapshot.workload.nodes,
        )
        progress_marks.step("acting on the verdicts")
        act.act_on_judgment(actor, snapshot, judgment, report.acted)
        report.acted.registered = judgment.names(Verdict.REGISTER)
        act.finish(judgment)
        act.relaunch(actor, view, judgment, report.acted, self.guard)
        if decide and report.error is None:
            if not self.guard():
                report.error = "no longer the leader; the plan was not applied"
                return
            progress_marks.step("acting on the plan")
            act.act_on_plan(actor, view, plan, report.acted, self.guard)
        report.error = report.error or report.acted.error

    # --- helpers -------------------------------------------------------------------------

    def _learn_runs(self, snapshot: Snapshot, record: bool) -> None:
        """The jobs finished since the last cycle: into the history and `job_runs` when
        `record` (the leader, not a dry run); the running jobs are followed either way."""
        finished = self.runs.finished(snapshot.workload)
        if not finished or not record:
            return
        self.runs.learn(finished)
        try:
            with self.db.session() as session:
                session.add_all(rows(finished))
        except ClusterMgrError as exc:
            log.warning("could not keep %d finished jobs' run times: %s", len(finished), exc)

    def _start_copies(self, images: Mapping[str, RegionImage]) -> str:
        """The machine-image copies waiting templates need: started where none is, followed
        where one is pending (`machine_images.start_copies`); what they are now."""
        wanted: dict[str, set[str]] = {}
        for name, found in images.items():
            if found.copy_wanted:
                provider = self.settings.template(name).provider
                wanted.setdefault(found.image.name, set()).add(provider)
        done: list[str] = []
        for image, providers in sorted(wanted.items()):
            progress_marks.step(f"copying image {image} into its regions")
            try:
                rows = start_copies(self.db, self.settings, self.images[image], providers)
            except ClusterMgrError as exc:
                log.warning("image %s: copies not started: %s", image, exc)
                done.append(f"{image}: {exc}")
                continue
            for row in rows:
                if row.provider in providers:
                    error = f" ({row.error})" if row.error else ""
                    done.append(f"{image} to {row.region} {row.state}{error}")
        return ", ".join(done)

    def controller_version(self) -> str:
        """slurmctld's version, asked again at most every VERSION_TTL_S (an upgrade of the
        controller is seen within the hour; a failed read is retried next cycle)."""
        now = time.monotonic()
        if not self._version or now - self._version[0] > VERSION_TTL_S:
            try:
                version = self.workload.config_values().get("SLURM_VERSION", "")
            except WorkloadError:
                version = ""
            self._version = (now, version) if version else None
            return version
        return self._version[1]

    def _list_instances(self, report: CycleReport) -> dict[str, dict[str, CloudInstance]]:
        listed: dict[str, dict[str, CloudInstance]] = {}
        used = {t.provider for t in self.settings.templates}
        for name in sorted(used):
            progress_marks.step(f"listing the instances of provider {name}")
            try:
                listed[name] = self.provider(name).list_instances()
            except (ProviderError, ClusterMgrError) as exc:
                report.provider_errors[name] = str(exc)
                log.warning("listing %s failed: %s", name, exc)
        return listed

    def _list_placement_groups(
        self, listed: Mapping[str, Mapping[str, CloudInstance]]
    ) -> dict[str, list[PlacementGroup]]:
        """The per-launch placement groups of the listed providers whose templates make them
        (one call each); a provider that cannot list them is judged again next cycle."""
        wanted = {t.provider for t in self.settings.templates if t.placement == "per-launch"}
        found: dict[str, list[PlacementGroup]] = {}
        for name in sorted(wanted & set(listed)):
            provider = self.provider(name)
            if not isinstance(provider, PlacementGroups):
                continue
            try:
                found[name] = provider.placement_groups()
            except (ProviderError, ClusterMgrError) as exc:
                log.warning("listing the placement groups of %s failed: %s", name, exc)
        return found

    def _reachable(self, report: CycleReport) -> dict[str, Provider]:
        return {n: p for n, p in self.providers.items() if n not in report.provider_errors}

    def _record(self, kind: str, message: str) -> None:
        from clustermgr.db.models import ClusterEvent

        try:
            with self.db.session() as session:
                session.add(
                    ClusterEvent(
                        at=self.clock(), kind=kind, source=self.actor_name, message=message
                    )
                )
        except ClusterMgrError as exc:
            log.warning("could not record %s event: %s", kind, exc)


@contextlib.contextmanager
def snapshot_frozen() -> Iterator[None]:
    """Keep the snapshot (100,000 pending jobs are 100,000 objects) out of the garbage
    collector's passes for the cycle: they live until its end, and each full pass walked
    them all again (it cost a third of reconcile's time at 10,000 nodes)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()

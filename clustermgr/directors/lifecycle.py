"""The director lifecycle: launch a region's director before its first burst node, see it
boot, sync and answer, replace it when lost, stop it when its region has been idle.

Each pass (`DirectorLifecycle.run`, once per scale cycle) takes the set of providers whose
region has burst demand, lists the directors' providers once, and per declared director
runs `decide` (pure: the row, the cloud's answer, the demand, the clock -> one Step), carries
the step out, and records every move with `state.transition` and a reason:

    STOPPED/LOST + demand     -> LAUNCHING (request id committed before the cloud call)
    LAUNCHING                 -> BOOTING when the request's instance exists (adopted after a
                                 crash), else the launch is re-issued with the same request
                                 id (idempotent at every provider)
    BOOTING                   -> SYNCING once it answers on its ports; LOST at boot_timeout_s
    SYNCING/UNHEALTHY         -> READY when the replicas are in sync (syncers run meanwhile)
    READY                     -> UNHEALTHY on a failed check, SYNCING when out of sync
    UNHEALTHY                 -> LOST after lost_after_failed_checks x health_interval_s
    live, instance gone       -> LOST; LOST -> terminate what is left, launch a replacement
                                 (or STOPPED without demand)
    idle past idle_stop_after_s, or removed from config -> STOPPING -> STOPPED

Director instances carry the tag clustermgr-role=director; the node reconciler never takes
them for orphans, and this pass terminates the ones no director row holds (after the
orphan grace period).
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import DirectorSettings, Settings
from clustermgr.core.errors import ClusterMgrError, ProviderError
from clustermgr.core.inputs import usable_address
from clustermgr.core.reasons import Reason
from clustermgr.db.database import Database
from clustermgr.db.models import Director, ImageReplica, LdapReplica
from clustermgr.db.ownership import DIRECTOR_LAUNCH, Ownership, issue, known
from clustermgr.directors.health import (
    DirectorHealth,
    DirectorInfo,
    HealthResult,
    Syncer,
    run_syncers,
)
from clustermgr.directors.states import (
    LIVE,
    DirectorState,
    director_name,
    ensure,
    region_of,
    transition,
)
from clustermgr.directors.strays import (
    ROLE_DIRECTOR,
    TAG_ROLE,
    orphan_directors,
    unheld_directors,
)
from clustermgr.directors.userdata import render_user_data
from clustermgr.providers.base import CloudInstance, InstanceState, LaunchSpec, Provider

log = logging.getLogger(__name__)

GONE = frozenset({InstanceState.TERMINATED, InstanceState.ERROR, InstanceState.STOPPING})
REPLICA_STALE = "stale"  # an image replica of a director's previous instance
D = DirectorState


class Action(enum.StrEnum):
    NOTHING = "nothing"
    LAUNCH = "launch"  # a new request: LAUNCHING, then the cloud call
    ADOPT = "adopt"  # LAUNCHING whose instance exists: bind it (BOOTING)
    RELAUNCH = "relaunch"  # LAUNCHING whose instance is not seen: same request id again
    CHECK = "check"  # ask the health hook, then `after_check`
    LOSE = "lose"  # -> LOST
    REPLACE = "replace"  # LOST with demand: terminate what is left, launch anew
    RETIRE = "retire"  # LOST without demand: terminate what is left, STOPPED
    STOP = "stop"  # -> STOPPING, terminate, STOPPED
    FINISH_STOP = "finish-stop"  # STOPPING (interrupted): terminate, STOPPED


@dataclass(frozen=True)
class CloudFacts:
    """What the provider's listing says about one director."""

    listed: bool  # False: the provider could not be listed; judge nothing that needs it
    instance: CloudInstance | None = None  # the row's instance id, when listed
    requested: CloudInstance | None = None  # an instance tagged with the row's request id


@dataclass(frozen=True)
class Step:
    action: Action
    reason: str = ""
    instance: CloudInstance | None = None


def new_request_id() -> str:
    return f"d-{uuid.uuid4().hex[:16]}"


def waiting_reason(name: str, state: DirectorState | None) -> str:
    """The reason burst nodes of a region wait: `(Code:DIRECTOR) waiting for director NAME
    (STATE)`. DIRECTOR is not a failure kind: protected mode does not count it."""
    return str(Reason("DIRECTOR", f"waiting for director {name} ({(state or D.STOPPED).value})"))


def _age(now: datetime, since: datetime | None) -> float:
    return (now - since).total_seconds() if since is not None else 0.0


def decide(
    spec: DirectorSettings | None,
    facts: DirectorInfo,
    cloud: CloudFacts,
    demand: bool,
    now: datetime,
) -> Step:
    """The one step to take for a director this pass (pure)."""
    state = facts.state
    if state is D.STOPPING:
        return Step(Action.FINISH_STOP, facts_reason(facts, "stop interrupted"))
    if spec is None:
        if state in LIVE or state is D.LOST:
            return Step(Action.STOP, "removed from the configuration")
        return Step(Action.NOTHING)
    if state is D.STOPPED:
        return Step(Action.LAUNCH, "burst demand in its region") if demand else Step(Action.NOTHING)
    if state is D.LOST:
        if demand:
            return Step(Action.REPLACE, "replacing a lost director")
        return Step(Action.RETIRE, "lost, and its region has no burst demand")
    if not cloud.listed:
        return Step(Action.NOTHING, "its provider could not be listed")
    idle_limit = spec.idle_stop_after_s
    if not demand and idle_limit is not None and _age(now, facts.idle_since) >= idle_limit:
        return Step(Action.STOP, f"its region has been idle for {idle_limit:.0f} s")
    booted_late = _age(now, facts.launched_at or facts.state_since) >= spec.boot_timeout_s
    if state is D.LAUNCHING:
        requested = cloud.requested
        if requested is not None and requested.state is not InstanceState.TERMINATED:
            return Step(Action.ADOPT, f"instance {requested.instance_id} launched", requested)
        if booted_late:
            return Step(Action.LOSE, f"no instance within {spec.boot_timeout_s:.0f} s of launch")
        return Step(Action.RELAUNCH, f"re-issuing launch request {facts.request_id}")
    instance = cloud.instance
    if instance is None or instance.state in GONE:
        what = "is gone" if instance is None else f"is {instance.state.value}"
        return Step(Action.LOSE, f"instance {facts.instance_id} {what}")
    if state is D.BOOTING:
        if booted_late:
            return Step(
                Action.LOSE, f"did not answer within boot_timeout_s = {spec.boot_timeout_s:.0f} s"
            )
        if instance.state is InstanceState.RUNNING and instance.private_address:
            return Step(Action.CHECK, instance=instance)
        return Step(Action.NOTHING, f"instance {instance.instance_id} is {instance.state.value}")
    checked = facts.healthy_at
    if state is D.READY and checked is not None and _age(now, checked) < spec.health_interval_s:
        return Step(Action.NOTHING, "checked recently")
    return Step(Action.CHECK, instance=instance)


def facts_reason(facts: DirectorInfo, default: str) -> str:
    return default if facts.instance_id is None else f"{default}: terminating {facts.instance_id}"


def after_check(
    spec: DirectorSettings, facts: DirectorInfo, result: HealthResult, now: datetime
) -> tuple[DirectorState, str]:
    """The state a check's result moves the director to (its own state: no move)."""
    state = facts.state
    if result.healthy and state is D.BOOTING:
        return D.SYNCING, f"answers: {result.detail}"
    if result.healthy:
        return D.READY, f"healthy: {result.detail}"
    if result.reachable:
        if state is D.READY:
            return D.SYNCING, f"out of sync: {result.detail}"
        if state in (D.BOOTING, D.UNHEALTHY):
            return D.SYNCING, f"answers, syncing: {result.detail}"
        return state, result.detail
    if state is D.BOOTING:
        return state, result.detail  # not up yet: the boot timeout decides
    if state is D.UNHEALTHY:
        allowed_s = spec.lost_after_failed_checks * spec.health_interval_s
        if _age(now, facts.state_since) >= allowed_s:
            return D.LOST, f"unhealthy for {allowed_s:.0f} s: {result.detail}"
        return state, result.detail
    return D.UNHEALTHY, f"health check failed: {result.detail}"


def launch_spec(spec: DirectorSettings, name: str, user_data: str = "") -> LaunchSpec:
    return LaunchSpec(
        template=name,
        instance_types=(spec.instance_type,),
        image=spec.image,
        node_names=(name,),
        zones=tuple(spec.zones),
        subnets=tuple(spec.subnets),
        security_groups=tuple(spec.security_groups),
        user_data=user_data,
        tags={TAG_ROLE: ROLE_DIRECTOR},
        instance_profile=spec.instance_profile,
        key_name=spec.key_name,
        network=spec.network,
        root_volume_gb=spec.volume_size_gb,
    )


def cloud_facts(listing: Mapping[str, CloudInstance] | None, facts: DirectorInfo) -> CloudFacts:
    if listing is None:
        return CloudFacts(listed=False)
    instance = listing.get(facts.instance_id) if facts.instance_id else None
    requested = None
    if facts.request_id:
        requested = next(
            (
                i
                for i in sorted(listing.values(), key=lambda i: i.instance_id)
                if i.request_id == facts.request_id and i.state is not InstanceState.TERMINATED
            ),
            None,
        )
    return CloudFacts(True, instance, requested)


@dataclass
class PassReport:
    moves: list[str] = field(default_factory=list)  # "NAME: old -> new (reason)"
    errors: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)  # terminated instance ids
    unreadable: set[str] = field(default_factory=set)  # instances of rows skipped this pass

    def summary(self) -> str:
        parts = list(self.moves)
        if self.orphans:
            parts.append(f"terminated orphan director instances {', '.join(self.orphans)}")
        parts += self.errors
        return "; ".join(parts)


class DirectorLifecycle:
    def __init__(
        self,
        settings: Settings,
        database: Database,
        provider_of: Callable[[str], Provider],
        health: DirectorHealth,
        syncers: Sequence[Syncer] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        actor: str = "cm-scale",
    ):
        self.settings = settings
        self.db = database
        self.provider_of = provider_of
        self.health = health
        self.syncers = list(syncers)
        self.clock = clock
        self.actor = actor

    # --- the pass ------------------------------------------------------------------------

    def run(self, demand: Collection[str]) -> PassReport:
        """One pass over every director; `demand` holds the provider names whose region
        has burst demand (nodes active or wanted, pending jobs that fit its templates)."""
        report = PassReport()
        rows = self._rows(report)
        listings = self._list({r.provider for r in rows}, report)
        for info in rows:
            spec = self.settings.director(info.provider)
            try:
                self._one(spec, info, listings.get(info.provider), info.provider in demand, report)
            except ClusterMgrError as exc:
                report.errors.append(f"{info.name}: {exc}")
                log.warning("director %s: %s", info.name, exc)
        grace = self.settings.daemon.orphan_grace_s
        rows = self._rows(report)
        ownership = self._ownership(unheld_directors(listings, rows))
        orphans = orphan_directors(listings, rows, self.clock(), grace, ownership)
        for provider, ids in orphans.items():
            try:
                self.provider_of(provider).terminate(ids, new_request_id())
                report.orphans.extend(ids)
            except ClusterMgrError as exc:
                report.errors.append(f"orphan director instances of {provider}: {exc}")
        return report

    def _ownership(self, unheld: Sequence[tuple[str, CloudInstance]]) -> Ownership:
        if not unheld:
            return Ownership()
        requests = {i.request_id for _, i in unheld if i.request_id}
        with self.db.session() as session:
            return known(session, requests, {i.instance_id for _, i in unheld})

    def _one(
        self,
        spec: DirectorSettings | None,
        info: DirectorInfo,
        listing: Mapping[str, CloudInstance] | None,
        demand: bool,
        report: PassReport,
    ) -> None:
        info = self._note_demand(info, demand)
        step = decide(spec, info, cloud_facts(listing, info), demand, self.clock())
        after = self._carry_out(spec, info, step, report)
        if after is not None and after.state is D.LOST and info.state is not D.LOST:
            # replaced (or retired) in the same pass; the listing is not needed for that
            again = decide(spec, after, CloudFacts(listed=False), demand, self.clock())
            self._carry_out(spec, after, again, report)

    def _carry_out(
        self, spec: DirectorSettings | None, info: DirectorInfo, step: Step, report: PassReport
    ) -> DirectorInfo | None:
        if step.action is Action.CHECK:
            assert spec is not None
            return self._check(spec, info, report)
        if step.action is Action.LOSE:
            return self._move(info, D.LOST, step.reason, report)
        if step.action in (Action.STOP, Action.FINISH_STOP):
            stopping = self._move(info, D.STOPPING, step.reason, report)
            if not self._terminate(stopping, report):
                return None
            return self._move(stopping, D.STOPPED, "terminated", report, forget=True)
        if step.action is Action.RETIRE:
            if not self._terminate(info, report):
                return None
            return self._move(info, D.STOPPED, step.reason, report, forget=True)
        if step.action in (Action.LAUNCH, Action.REPLACE, Action.RELAUNCH):
            assert spec is not None
            user_data = self._user_data(spec, info, report)
            if user_data is None:
                return None
            if step.action is Action.RELAUNCH:
                return self._launch(spec, info, user_data, report)
            if step.action is Action.REPLACE and not self._terminate(info, report):
                return None
            request_id = new_request_id()
            launching = self._move(
                info, D.LAUNCHING, f"{step.reason} (request {request_id})", report, request_id
            )
            return self._launch(spec, launching, user_data, report)
        if step.action is Action.ADOPT and step.instance is not None:
            return self._bind(info, step.instance, step.reason, report)
        return None

    # --- the primitives (each commits before or after its one outside call) ---------------

    def _user_data(
        self, spec: DirectorSettings, info: DirectorInfo, report: PassReport
    ) -> str | None:
        """The director's user data; None (and the reason reported) when it cannot be made:
        nothing is launched, and the next pass tries again."""
        try:
            return render_user_data(self.settings, spec, info.name)
        except ClusterMgrError as exc:
            report.errors.append(f"{info.name}: not launched: {exc}")
            log.warning("director %s not launched: %s", info.name, exc)
            return None

    def _launch(
        self, spec: DirectorSettings, info: DirectorInfo, user_data: str, report: PassReport
    ) -> DirectorInfo:
        assert info.request_id is not None
        try:
            provider = self.provider_of(info.provider)
            result = provider.launch(launch_spec(spec, info.name, user_data), 1, info.request_id)
        except ProviderError as exc:
            why = str(Reason(exc.kind.value, f"{exc.code or 'ProviderError'}: {exc.args[0]}"))
            return self._move(info, D.LOST, f"launch failed: {why}", report)
        if result.instances:
            instance = result.instances[0]
            return self._bind(info, instance, f"instance {instance.instance_id} launched", report)
        why = result.errors[0].reason() if result.errors else "the provider returned no instance"
        return self._move(info, D.LOST, f"launch failed: {why}", report)

    def _bind(
        self, info: DirectorInfo, instance: CloudInstance, reason: str, report: PassReport
    ) -> DirectorInfo:
        now = self.clock()
        with self.db.session() as session:
            row = self._row(session, info)
            row.instance_id = instance.instance_id
            row.instance_type = instance.instance_type
            row.private_address = instance.private_address
            row.launched_at = row.launched_at or instance.launch_time or now
            self._transition(row, D.BOOTING, reason, now, report)
            return self._info(session, row)

    def _check(
        self, spec: DirectorSettings, info: DirectorInfo, report: PassReport
    ) -> DirectorInfo:
        result = self.health.check(info)
        now = self.clock()
        new, reason = after_check(spec, info, result, now)
        errors: list[str] = []
        if new is D.SYNCING:
            errors = run_syncers(self.syncers, info)
        with self.db.session() as session:
            row = self._row(session, info)
            row.health = (result.detail + "".join(f"; sync: {e}" for e in errors))[:2000]
            row.updated_at = now
            self._transition(row, new, reason, now, report)
            if result.healthy:  # already in sync when it first answers: READY at once
                row.healthy_at = now
                self._transition(row, D.READY, f"healthy: {result.detail}", now, report)
            return self._info(session, row)

    def _terminate(self, info: DirectorInfo, report: PassReport) -> bool:
        """Terminate the director's instance and any other of its request; True when the
        provider accepted (or there was nothing to terminate)."""
        ids = [info.instance_id] if info.instance_id else []
        if info.request_id:
            try:
                listing = self.provider_of(info.provider).list_instances()
            except ClusterMgrError as exc:
                report.errors.append(f"{info.name}: cannot list {info.provider}: {exc}")
                return False
            ids += [
                i.instance_id
                for i in listing.values()
                if i.request_id == info.request_id and i.instance_id not in ids
            ]
        if not ids:
            return True
        try:
            self.provider_of(info.provider).terminate(ids, new_request_id())
        except ClusterMgrError as exc:
            report.errors.append(f"{info.name}: terminating {', '.join(ids)} failed: {exc}")
            return False
        return True

    def _move(
        self,
        info: DirectorInfo,
        new: DirectorState,
        reason: str,
        report: PassReport,
        request_id: str | None = None,
        forget: bool = False,
    ) -> DirectorInfo:
        now = self.clock()
        with self.db.session() as session:
            row = self._row(session, info)
            if request_id is not None:  # a new launch: its request id before any cloud call
                issue(session, request_id, DIRECTOR_LAUNCH, info.provider, info.name, now)
                row.request_id = request_id
                row.instance_id = row.private_address = None
                row.launched_at = now
                row.healthy_at = None
                forget_replicas(session, row.id, now)
            if forget:
                row.instance_id = row.private_address = row.request_id = None
            self._transition(row, new, reason, now, report)
            return self._info(session, row)

    def _transition(
        self,
        row: Director,
        new: DirectorState,
        reason: str,
        now: datetime,
        report: PassReport,
    ) -> None:
        old = row.state
        if old == new.value:
            return
        transition(row, new, reason, self.actor, now=now)
        report.moves.append(f"{row.name}: {old} -> {new.value} ({reason})")
        log.info("director %s: %s -> %s (%s)", row.name, old, new.value, reason)

    # --- reading -------------------------------------------------------------------------

    def _note_demand(self, info: DirectorInfo, demand: bool) -> DirectorInfo:
        """idle_since: cleared by demand, set when a serving director's region has none."""
        idle_since = None if demand else (info.idle_since or self.clock())
        if idle_since == info.idle_since:
            return info
        with self.db.session() as session:
            row = self._row(session, info)
            row.idle_since = idle_since
            return self._info(session, row)

    def _rows(self, report: PassReport) -> list[DirectorInfo]:
        """Every declared director's row (made STOPPED when missing), and every other row
        that is not STOPPED (removed from the config: stopped by this pass)."""
        now = self.clock()
        with self.db.session() as session:
            for spec in self.settings.directors:
                region = self.settings.provider(spec.provider).region
                try:
                    ensure(session, spec.provider, region, actor=self.actor, now=now)
                except LookupError as exc:
                    report.errors.append(f"{director_name(spec.provider, region)}: {exc}")
            rows = session.scalars(select(Director).order_by(Director.name)).all()
            infos = [self._info(session, row) for row in rows if _known_state(row, report)]
        declared = {
            director_name(d.provider, self.settings.provider(d.provider).region)
            for d in self.settings.directors
        }
        return [i for i in infos if i.name in declared or i.state is not D.STOPPED]

    def _list(
        self, providers: Collection[str], report: PassReport
    ) -> dict[str, Mapping[str, CloudInstance]]:
        listings: dict[str, Mapping[str, CloudInstance]] = {}
        for name in sorted(providers):
            try:
                listed = self.provider_of(name).list_instances()
                # an unreadable row's instance is neither acted on nor an orphan this pass
                listings[name] = {i: v for i, v in listed.items() if i not in report.unreadable}
            except ClusterMgrError as exc:
                report.errors.append(f"listing {name} failed: {exc}")
        return listings

    @staticmethod
    def _row(session: Session, info: DirectorInfo) -> Director:
        row = session.get(Director, info.id)
        if row is None:
            raise ClusterMgrError(f"director {info.name} was removed from the database")
        return row

    @staticmethod
    def _info(session: Session, row: Director) -> DirectorInfo:
        provider, region = region_of(session, row)
        return info_of(row, provider, region)


def _known_state(row: Director, report: PassReport) -> bool:
    """A row no cm-scale wrote (an unknown state) is skipped this pass, not fatal to it."""
    if row.state in {state.value for state in DirectorState}:
        return True
    error = f"{row.name}: unknown state {str(row.state)[:40]!r} in the database; skipped"
    if error not in report.errors:
        report.errors.append(error)
    if row.instance_id:
        report.unreadable.add(row.instance_id)
    return False


def forget_replicas(session: Session, director_id: int, now: datetime) -> None:
    """A new instance holds no replica: its image replicas are no longer verified and its
    LDAP replica no longer answers, until the replication says otherwise."""
    for image in session.scalars(select(ImageReplica).filter_by(director_id=director_id)):
        image.state, image.verified_at, image.checksum = REPLICA_STALE, None, None
        image.updated_at = now
    for ldap in session.scalars(select(LdapReplica).filter_by(director_id=director_id)):
        ldap.state, ldap.error, ldap.updated_at = "unreachable", "new director instance", now


def info_of(row: Director, provider: str, region: str) -> DirectorInfo:
    return DirectorInfo(
        id=row.id,
        name=row.name,
        provider=provider,
        region=region,
        state=DirectorState(row.state),
        state_since=row.state_since,
        instance_id=row.instance_id,
        request_id=row.request_id,
        private_address=usable_address(row.private_address, f"director {row.name}"),
        launched_at=row.launched_at,
        healthy_at=row.healthy_at,
        idle_since=row.idle_since,
    )


def idle_deadline(spec: DirectorSettings, info: DirectorInfo) -> datetime | None:
    """When an idle director will be stopped (for `clustermgr directors show`)."""
    if spec.idle_stop_after_s is None or info.idle_since is None:
        return None
    return info.idle_since + timedelta(seconds=spec.idle_stop_after_s)

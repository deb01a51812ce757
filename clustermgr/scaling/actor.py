"""The act primitives: launch, bind, tell Slurm, fail, stop. Every change is a recorded
transition, and the only calls to clouds and to Slurm's actions are made from here.

Crash safety: each primitive commits its intent before the outside call it makes
(LAUNCHING with the request id before the launch, FAILED or STOPPING before terminating),
so a process killed at any point leaves a row whose verdict finishes the work (see
verdicts.py); re-issuing a request id is idempotent at every provider.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.core import progress_marks
from clustermgr.core.errors import ConfigError, ErrorKind, ProviderError, WorkloadError
from clustermgr.core.inputs import usable_address
from clustermgr.core.pricing import BillingRule, price_of
from clustermgr.core.reasons import HOLD_PREFIX, HOLD_REASON
from clustermgr.db.batched import insert_rows
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, InstanceRun, Node
from clustermgr.db.models import ForeignInstance as ForeignRow
from clustermgr.db.ownership import (
    NODE_LAUNCH,
    IssuedLaunch,
    LaunchIdentity,
    issue,
    issued_launch,
)
from clustermgr.imaging.launch_images import ImageUnavailable
from clustermgr.mungekey import IdentityError
from clustermgr.nodes.states import Move, NodeState, transition, transition_all
from clustermgr.policy.view import TemplateView
from clustermgr.providers.base import CloudInstance, LaunchError, LaunchSpec, Provider
from clustermgr.providers.launch_groups import PlacementGroup, PlacementGroups
from clustermgr.scaling.clamp import LaunchOrder, StopOrder
from clustermgr.scaling.onprem import power_off_blocked
from clustermgr.scaling.ownership import FOREIGN_VERDICT, ForeignInstance
from clustermgr.workload.base import Workload, WorkloadNode

log = logging.getLogger(__name__)

ADOPTED_ON = "already on (BMC on, registered in Slurm): adopted"  # an on-prem node found on


class Specs(Protocol):
    """What a launch order asks its cloud for (scaling/specs.py `LaunchSpecs`)."""

    def __call__(self, order: LaunchOrder) -> LaunchSpec: ...

    def identity(self, order: LaunchOrder) -> LaunchIdentity: ...


@dataclass
class LaunchOutcome:
    order: LaunchOrder
    launched: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # node -> (Code:KIND) reason
    errors: list[LaunchError] = field(default_factory=list)

    @property
    def out_of_capacity(self) -> bool:
        return any(e.kind is ErrorKind.CAPACITY for e in self.errors)


class Actor:
    def __init__(
        self,
        templates: Mapping[str, TemplateView],
        database: Database,
        workload: Workload,
        providers: Mapping[str, Provider],
        clock: Callable[[], datetime],
        specs: Specs,
        actor: str = "cm-scale",
        slurm_nodes: Mapping[str, WorkloadNode] | None = None,
    ):
        """`templates`: the cycle's view of them (provider, prices, billing); `specs`: what a
        launch order asks its cloud for (scaling/specs.py, built from the configuration and
        the snapshot: act reads no configuration). `slurm_nodes`: Slurm's nodes as this
        cycle's snapshot saw them; an on-prem node is powered off only when they show it
        safe (`onprem.power_off_blocked`)."""
        self.templates = templates
        self.specs = specs
        self.slurm_nodes = slurm_nodes or {}
        self.onprem = frozenset(t.provider for t in templates.values() if t.onprem)
        self.billing = {t.provider: t.billing for t in templates.values()}
        self.db = database
        self.workload = workload
        self.providers = providers
        self.clock = clock
        self.actor = actor

    def template(self, name: str) -> TemplateView:
        if name not in self.templates:  # an order from before the template left the config
            raise ConfigError(f"no template named {name!r} in the configuration")
        return self.templates[name]

    # --- launching ------------------------------------------------------------------------

    def begin_launch(self, order: LaunchOrder) -> None:
        """Record the intent (LAUNCHING + request id) before any cloud call, and the request
        id as issued: only an instance carrying an issued id is ever adopted or terminated."""
        now = self.clock()
        provider = self.template(order.template).provider
        identity = order.stored or self.specs.identity(order)
        with self.db.session() as session:
            issue(session, order.request_id, NODE_LAUNCH, provider, order.template, now, identity)
            intent = {"request_id": order.request_id, "market": order.market, "instance_id": None}
            moves = [(node, order.reason, intent) for node in self._nodes(session, order.nodes)]
            transition_all(session, moves, NodeState.LAUNCHING, self.actor, now)

    def issued_launch(self, request_id: str) -> IssuedLaunch | None:
        """The node launch the database issued under this id, with what it asked for."""
        with self.db.session() as session:
            return issued_launch(session, request_id)

    def launch(self, order: LaunchOrder) -> LaunchOutcome:
        """Call the provider and bind what started; the rest is failed with its reason."""
        outcome = LaunchOutcome(order)
        provider = self.providers.get(self.template(order.template).provider)
        if provider is None:
            error = LaunchError(ErrorKind.OTHER, "ProviderUnavailable", "provider not reachable")
            return self._fail_all(outcome, error)
        progress_marks.step(
            f"launching {len(order.nodes)} of {order.template} ({order.request_id})"
        )
        try:
            spec = self.specs(order)
        except IdentityError as exc:  # no key server certificate: no node could join
            return self._fail_all(outcome, LaunchError(ErrorKind.OTHER, "MungeKey", str(exc)))
        except ImageUnavailable as exc:  # the template's image is not in its region yet
            return self._fail_all(outcome, LaunchError(ErrorKind.OTHER, "MachineImage", str(exc)))
        try:
            result = provider.launch(spec, len(order.nodes), order.request_id)
        except ProviderError as exc:
            error = LaunchError(exc.kind, exc.code or type(exc).__name__, str(exc.args[0]))
            return self._fail_all(outcome, error)
        outcome.errors = list(result.errors)
        by_node = {
            i.node_name: i for i in result.instances if i.node_name and i.node_name in order.nodes
        }
        self.bind(order.template, by_node)
        outcome.launched = sorted(by_node)
        missing = [n for n in order.nodes if n not in by_node]
        if missing and order.all_or_nothing:  # what the cloud could not release goes too
            outcome.launched, missing = [], list(order.nodes)
        if missing:
            first = (
                result.errors[0]
                if result.errors
                else LaunchError(
                    ErrorKind.OTHER, "Incomplete", "the provider returned fewer instances"
                )
            )
            outcome.failed = {n: first.reason() for n in missing}
        return outcome

    def _fail_all(self, outcome: LaunchOutcome, error: LaunchError) -> LaunchOutcome:
        outcome.errors = [error]
        outcome.failed = {n: error.reason() for n in outcome.order.nodes}
        return outcome

    def bind(self, template_name: str, instances: Mapping[str, CloudInstance]) -> None:
        """Nodes hold their instances: BOOTING, and a cost record opened per instance."""
        if not instances:
            return
        now = self.clock()
        template = self.template(template_name)
        billed = template.provider not in self.onprem  # an on-prem node is its own "instance"
        with self.db.session() as session:
            nodes = self._nodes(session, list(instances))
            found_on = [n for n in nodes if n.state == NodeState.POWERED_DOWN]
            adopted: list[Move] = [(node, ADOPTED_ON, {}) for node in found_on]
            transition_all(session, adopted, NodeState.LAUNCHING, self.actor, now)
            moves: list[Move] = []
            runs: list[dict[str, object]] = []
            for node in nodes:
                instance = instances[node.name]
                hourly = price_of(
                    template.prices,
                    template.instance_types,
                    instance.instance_type,
                    instance.lifecycle,
                )
                columns, run = held(node, instance, template.name, now, hourly)
                moves.append((node, started(instance), columns))
                runs.append(run)
            transition_all(session, moves, NodeState.BOOTING, self.actor, now)
            if billed:  # every power cycle, unbilled
                insert_rows(session, InstanceRun.__table__, runs)  # type: ignore[arg-type]

    def wake(self, names: Sequence[str]) -> None:
        """Ask Slurm to power the nodes up before their instances exist: slurmctld ends
        POWERING_UP only on a registration whose boot is later than its power-up request,
        so a node booted before it would never join. A held node stays drained meanwhile,
        so Slurm places no job on it until `release` (after the cloud accepted the launch):
        a launch that fails then has no job to requeue."""
        if not names:
            return
        try:
            self.workload.power_up(sorted(names))
        except WorkloadError as exc:  # Slurm refused (a node it powers up or down already)
            # a warning: the launch goes on, but a node Slurm did not power up never joins
            log.warning("Slurm refused to power up %s: %s", sorted(names), exc)

    def tell_slurm(
        self,
        launched: Sequence[str],
        power_up: Collection[str] = (),
        release: Collection[str] = (),
    ) -> None:
        """Addresses first (batched), then wake the `power_up` nodes (ones whose instance
        runs while Slurm still has them powered down: adopted after a crash, or launched by
        a version that woke nodes after the launch), then release the hold of the `release`
        nodes: their instances exist and are bound, so Slurm may place jobs on them now.
        A node whose address Slurm was not told stays held: the next cycle tells again."""
        if not launched:
            return
        with self.db.session() as session:
            found = {
                n.name: usable_address(n.private_address, f"node {n.name}")
                for n in self._nodes(session, launched)
                if n.private_address
            }
        addresses = {name: address for name, address in found.items() if address}
        usable = set(launched) - {name for name, address in found.items() if not address}
        told = True
        try:
            self.workload.set_addresses(addresses)
        except WorkloadError as exc:  # the nodes stay `untold`: the next cycle tells again
            log.warning("Slurm was not told the addresses of %s: %s", sorted(addresses), exc)
            told = False
        self.wake(sorted(set(power_up) & usable))
        if told:
            self.release(sorted(set(release) & usable))

    # --- failing and stopping -------------------------------------------------------------

    def fail(
        self,
        reasons: Mapping[str, str],
        terminate: bool = True,
        tell_slurm: Collection[str] | None = None,
    ) -> None:
        """Unfixable: record FAILED, POWER_DOWN_FORCE in Slurm with the reason (jobs requeue
        at once, nodes return to the pool), terminate the instances, record POWERED_DOWN.
        `tell_slurm`: the nodes Slurm still has to hear about (default: all)."""
        if not reasons:
            return
        now = self.clock()
        with self.db.session() as session:
            nodes = self._nodes(session, list(reasons))
            doomed = [(n.provider, n.instance_id) for n in nodes if n.instance_id]
            for node in nodes:
                transition(node, NodeState.FAILED, reasons[node.name], self.actor, now=now)
        told = (
            reasons if tell_slurm is None else {n: reasons[n] for n in tell_slurm if n in reasons}
        )
        for reason, names in sorted(_group(told).items()):
            self._slurm_quietly(self.workload.power_down, names, reason, force=True)
        terminated = self._terminate(doomed, "fail") if terminate else set()
        with self.db.session() as session:
            for node in self._nodes(session, list(reasons)):
                if terminate and node.instance_id and node.instance_id not in terminated:
                    continue  # stays FAILED holding its instance: the next cycle finishes it
                release_instance(session, node, now, self._billing(node))
                transition(node, NodeState.POWERED_DOWN, node.state_reason, self.actor, now=now)

    def stop(self, orders: Sequence[StopOrder], tell_slurm: Collection[str] | None = None) -> None:
        if not orders:
            return
        now = self.clock()
        reasons = {o.node: o.reason for o in orders}
        with self.db.session() as session:
            for node in self._nodes(session, list(reasons)):
                transition(node, NodeState.STOPPING, reasons[node.name], self.actor, now=now)
        self.finish_stopping(reasons, tell_slurm)

    def stop_idle(self, orders: Sequence[StopOrder]) -> list[StopOrder]:
        """A policy's stops of nodes the snapshot showed idle. Slurm may have given one a
        job since (a POWER_DOWN then requeues that job, and Slurm powers the node up again
        for it), so the nodes are drained first, Slurm is read again, and only drained,
        jobless ones are stopped; a node that took a job is kept. Our drain is lifted again
        once the stop is under way: the hold that follows is the cycle's business, as
        before. Returns the stops made."""
        if not orders:
            return []
        reasons = {o.node: o.reason for o in orders}
        # a drain already there (an admin's, a hold) keeps jobs off and is not ours to lift
        ours = [n for n in reasons if not (n in self.slurm_nodes and self.slurm_nodes[n].drained)]
        try:
            for reason, names in sorted(_group({n: reasons[n] for n in ours}).items()):
                self.workload.drain(sorted(names), f"{HOLD_PREFIX}{reason}")
            seen = self.workload.node_states()
        except WorkloadError as exc:
            log.warning(
                "not stopping %s: Slurm could not drain or show them: %s", sorted(reasons), exc
            )
            seen = {}
        jobless = {n for n in reasons if (node := seen.get(n)) is not None and node.idle}
        busy = sorted(set(reasons) - jobless)
        if busy:
            log.info("keeping %s: Slurm gave them a job since the snapshot", busy)
        stops = [o for o in orders if o.node in jobless]
        self.stop(stops)
        self._slurm_quietly(self.workload.undrain, ours)
        return stops

    def finish_stopping(
        self, reasons: Mapping[str, str], tell_slurm: Collection[str] | None = None
    ) -> None:
        """POWER_DOWN in Slurm, terminate, and once the provider accepted it, POWERED_DOWN."""
        told = (
            reasons if tell_slurm is None else {n: reasons[n] for n in tell_slurm if n in reasons}
        )
        for reason, names in sorted(_group(told).items()):
            self._slurm_quietly(self.workload.power_down, names, reason, force=False)
        with self.db.session() as session:
            doomed = [
                (n.provider, n.instance_id)
                for n in self._nodes(session, list(reasons))
                if n.instance_id
            ]
        terminated = self._terminate(doomed, "stop")
        now = self.clock()
        with self.db.session() as session:
            for node in self._nodes(session, list(reasons)):
                if node.instance_id and node.instance_id not in terminated:
                    continue  # stays STOPPING; the reconciler tries again
                release_instance(session, node, now, self._billing(node))
                transition(node, NodeState.POWERED_DOWN, node.state_reason, self.actor, now=now)

    def retire(self, reasons: Mapping[str, str]) -> list[str]:
        """Drain in Slurm the nodes that run a stale image revision, with their
        `(Code:IMAGE)` reasons: their jobs finish, none start. Returns the nodes Slurm
        took the drain for (the others are judged again next cycle)."""
        done: list[str] = []
        for reason, names in sorted(_group(reasons).items()):
            try:
                self.workload.drain(sorted(names), reason)
            except WorkloadError as exc:
                log.warning("not draining %s for their image: %s", sorted(names), exc)
                continue
            log.info("draining %s: %s", sorted(names), reason)
            done.extend(names)
        return sorted(done)

    def put_down(self, reasons: Mapping[str, str]) -> None:
        """Power down in Slurm the slots it powers up that no launch owns (their rows are
        POWERED_DOWN already); `reasons` keep them held, with their last failure shown."""
        for reason, names in sorted(_group(reasons).items()):
            log.info("powering %s down again: Slurm powered them up, no launch owns them", names)
            self._slurm_quietly(self.workload.power_down, names, reason, force=True)

    def terminate_orphans(self, orphans: Mapping[str, Sequence[str]]) -> list[str]:
        done: list[str] = []
        for provider_name, ids in sorted(orphans.items()):
            done.extend(sorted(self._terminate([(provider_name, i) for i in ids], "orphan")))
        return done

    def delete_placement_groups(self, spent: Mapping[str, Sequence[PlacementGroup]]) -> list[str]:
        """Delete per-launch placement groups no launch needs; the names deleted. One the
        cloud still holds (an instance still in it) or refuses is tried again next cycle."""
        done: list[str] = []
        for provider_name, groups in sorted(spent.items()):
            provider = self.providers.get(provider_name)
            if not isinstance(provider, PlacementGroups):
                continue
            for group in groups:
                try:
                    if provider.delete_placement_group(group):
                        done.append(group.name)
                except ProviderError as exc:
                    log.warning("placement group %s not deleted: %s", group.name, exc)
        return done

    def note_foreign(
        self, foreign: Mapping[str, Sequence[ForeignInstance]], listed: Collection[str]
    ) -> tuple[list[ForeignInstance], list[str]]:
        """Keep the foreign_instances table equal to this cycle's finding for the providers
        it `listed` (the others keep their rows until they are listed again): new ones are
        added with the time first seen, and an event is recorded once when one appears and
        once when it is gone (or proven ours). Returns (the new ones, the gone ones)."""
        now = self.clock()
        new: list[ForeignInstance] = []
        gone: list[str] = []
        with self.db.session() as session:
            rows = {
                (row.provider, row.instance_id): row
                for row in session.scalars(
                    select(ForeignRow).where(ForeignRow.provider.in_(sorted(listed)))
                )
            }
            seen: set[tuple[str, str]] = set()
            for provider in sorted(listed):
                for found in foreign.get(provider, ()):
                    key = (provider, found.instance_id)
                    if key in seen:  # two ids alike once escaped and cut: one row
                        continue
                    seen.add(key)
                    row = rows.pop(key, None)
                    if row is None:
                        session.add(_foreign_row(found, now))
                        new.append(found)
                        why = f"foreign instance {found.describe()}: {FOREIGN_VERDICT}"
                        session.add(
                            ClusterEvent(at=now, kind="foreign", source=self.actor, message=why)
                        )
                    else:
                        row.state, row.last_seen_at = found.state, now
            for (provider, instance_id), row in sorted(rows.items()):
                session.delete(row)
                gone.append(f"{provider} {instance_id}")
                message = f"foreign instance {provider} {instance_id} no longer listed as foreign"
                session.add(
                    ClusterEvent(at=now, kind="foreign", source=self.actor, message=message)
                )
        return new, gone

    def power_off(self, nodes: Mapping[str, Sequence[str]], why: str) -> list[str]:
        """Switch off on-prem nodes no row holds on (provider -> node names), through the
        same safety check as every power-off."""
        done: list[str] = []
        for provider_name, names in sorted(nodes.items()):
            done.extend(sorted(self._terminate([(provider_name, n) for n in names], why)))
        return done

    def _terminate(self, doomed: Sequence[tuple[str | None, str | None]], why: str) -> set[str]:
        by_provider: dict[str, list[str]] = {}
        for provider_name, instance_id in doomed:
            if provider_name and instance_id:
                if provider_name in self.onprem and self._keep_powered(instance_id, why):
                    continue  # stays STOPPING or FAILED: the next cycle looks again
                by_provider.setdefault(provider_name, []).append(instance_id)
        done: set[str] = set()
        for name, ids in sorted(by_provider.items()):
            provider = self.providers.get(name)
            if provider is None:
                continue
            progress_marks.step(f"terminating {len(ids)} instances on {name}")
            try:
                provider.terminate(ids, f"{why}-{self.clock():%Y%m%d%H%M%S}")
                done.update(ids)
            except ProviderError as exc:
                log.warning("terminate on %s failed: %s", name, exc)
        return done

    def _keep_powered(self, node: str, why: str) -> bool:
        """Never power off an on-prem node with jobs on it or one Slurm still schedules on
        (an on-prem instance id is the node's name)."""
        blocked = power_off_blocked(self.slurm_nodes.get(node))
        if blocked is not None:
            log.info("not powering %s off yet (%s): %s", node, why, blocked)
        return blocked is not None

    def set_down(self, reasons: Mapping[str, str]) -> None:
        """DOWN in Slurm with each node's reason: out until an admin resumes it."""
        for reason, names in sorted(_group(reasons).items()):
            self._slurm_quietly(self.workload.set_down, names, reason)

    def hold(self, names: Sequence[str], reason: str = HOLD_REASON) -> None:
        """Keep powered-down policy-mode nodes out of scheduling (DRAIN with a reason)."""
        if names:
            self._slurm_quietly(self.workload.drain, names, reason)

    def release(self, names: Sequence[str]) -> None:
        """Undo `hold`: clear the drain, so Slurm may place jobs on the nodes (or, powered
        down, resume them itself)."""
        if names:
            self._slurm_quietly(self.workload.undrain, names)

    def comment(self, updates: Mapping[str, Sequence[str]]) -> int:
        """Pending jobs' comments set (text -> jobs; "" clears), the batches Slurm refused
        logged (a job that ended since the snapshot); how many jobs were written."""
        written = 0
        for text, jobs in sorted(updates.items()):
            try:
                self.workload.comment_jobs(sorted(jobs), text)
                written += len(jobs)
            except WorkloadError as exc:
                log.warning("comment of %d pending jobs not set: %s", len(jobs), exc)
        return written

    def _slurm_quietly(
        self, action: Callable[..., None], names: Sequence[str], *args: object, **kwargs: object
    ) -> None:
        try:
            action(sorted(names), *args, **kwargs)
        except WorkloadError as exc:
            log.warning("%s %s: %s", getattr(action, "__name__", "slurm"), names, exc)

    def _billing(self, node: Node) -> BillingRule:
        return self.billing.get(node.provider or "", BillingRule(1, 0))

    def _nodes(self, session: Session, names: Sequence[str]) -> list[Node]:
        if not names:
            return []
        return list(
            session.scalars(select(Node).where(Node.name.in_(list(names))).order_by(Node.name))
        )


def held(
    node: Node, instance: CloudInstance, template: str, now: datetime, hourly_price: float
) -> tuple[dict[str, object], dict[str, object]]:
    """The node's columns once it holds the instance, and its cost record's."""
    launched_at = instance.launch_time or now
    columns: dict[str, object] = {
        "instance_id": instance.instance_id,
        "instance_type": instance.instance_type,
        "private_address": instance.private_address,
        "market": instance.lifecycle,
        "launched_at": launched_at,
    }
    run: dict[str, object] = {
        "node": node.name,
        "template": template,
        "provider": node.provider or "",
        "instance_id": instance.instance_id,
        "instance_type": instance.instance_type,
        "market": instance.lifecycle,
        "hourly_price": hourly_price,
        "started_at": launched_at,
    }
    return columns, run


def started(instance: CloudInstance) -> str:
    return f"instance {instance.instance_id} ({instance.instance_type}) started"


def release_instance(session: Session, node: Node, now: datetime, billing: BillingRule) -> None:
    """Close the node's cost record (billed by its provider's rule) and forget its instance."""
    if node.instance_id:
        run = session.scalars(
            select(InstanceRun).where(InstanceRun.instance_id == node.instance_id)
        ).first()
        if run is not None and run.ended_at is None:
            run.ended_at = now
            run.cost = billing.cost(run.hourly_price, (now - run.started_at).total_seconds())
    node.instance_id = None
    node.private_address = None
    node.request_id = None
    node.idle_since = None
    node.image_revision = None  # the next instance reports its own
    node.kernel = None


def _foreign_row(found: ForeignInstance, now: datetime) -> ForeignRow:
    return ForeignRow(
        provider=found.provider,
        instance_id=found.instance_id,
        template_tag=found.template,
        request_tag=found.request_id,
        role_tag=found.role,
        state=found.state,
        launched_at=found.launched_at,
        first_seen_at=now,
        last_seen_at=now,
    )


def _group(reasons: Mapping[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for node, reason in reasons.items():
        grouped.setdefault(reason, []).append(node)
    return grouped

"""One scaling cycle: observe -> reconcile -> decide -> clamp -> act -> record.

Observe first: if Slurm cannot be read the cycle acts on nothing and says so in one line;
a provider that cannot be listed is left alone (its nodes are judged next cycle).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select

from clustermgr.config import Settings
from clustermgr.db.engine import Database
from clustermgr.db.models import ClusterEvent, Node
from clustermgr.errors import ClusterMgrError, ProviderError, WorkloadError
from clustermgr.lifecycle import NodeState
from clustermgr.policy.base import Launch, ScaleDecision
from clustermgr.policy.chain import PolicyRunner
from clustermgr.policy.loader import load_chain
from clustermgr.providers.base import CloudInstance, Provider
from clustermgr.providers.registry import make_provider
from clustermgr.scaling.act import HOLD_REASON, Actor, LaunchOutcome
from clustermgr.scaling.clamp import LaunchOrder, Plan, clamp, new_request_id
from clustermgr.scaling.observe import build_view
from clustermgr.scaling.reconcile import (
    ReconcileReport,
    apply_hook_requests,
    observe_slurm,
    reconcile_cloud,
    replace_unhealthy,
)
from clustermgr.scaling.view import ClusterView
from clustermgr.workload.base import WorkloadNode
from clustermgr.workload.hooks import HookRequest, consume, read_requests
from clustermgr.workload.slurm import SlurmCli

log = logging.getLogger(__name__)


@dataclass
class CycleReport:
    started: datetime
    duration_s: float = 0.0
    error: str | None = None
    plan: Plan | None = None
    launched: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    reconcile: ReconcileReport | None = None
    provider_errors: dict[str, str] = field(default_factory=dict)
    view: ClusterView | None = None

    def summary(self) -> str:
        if self.error:
            return f"cycle failed: {self.error}"
        parts = [f"launched {len(self.launched)}", f"stopped {len(self.stopped)}"]
        if self.failed:
            parts.append(f"failed {len(self.failed)}")
        if self.reconcile and self.reconcile.registered:
            parts.append(f"registered {len(self.reconcile.registered)}")
        if self.provider_errors:
            parts.append(f"provider errors: {', '.join(sorted(self.provider_errors))}")
        return ", ".join(parts)


def implied_resumes(
    database: Database, slurm_nodes: Mapping[str, WorkloadNode]
) -> list[HookRequest]:
    """Cloud nodes Slurm is already bringing up for a job while we hold them powered down:
    a resume request we never saw (spool unwritable, daemon restarting). Treat it as one
    instead of leaving the job to wait for ResumeTimeout."""
    busy = {
        name
        for name, node in slurm_nodes.items()
        if node.is_cloud
        and (node.powering_up or (node.powered_down and node.state in ("ALLOCATED", "MIXED")))
    }
    if not busy:
        return []
    with database.session() as session:
        waiting = sorted(
            session.scalars(
                select(Node.name).where(
                    Node.name.in_(busy), Node.state == NodeState.POWERED_DOWN.value
                )
            )
        )
    if not waiting:
        return []
    return [HookRequest(kind="resume", nodes=tuple(waiting), jobs={}, at=time.time())]


class Engine:
    def __init__(
        self,
        settings: Settings,
        database: Database,
        slurm: SlurmCli | None = None,
        providers: Mapping[str, Provider] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        actor: str = "cm-scale",
    ):
        self.settings = settings
        self.db = database
        self.slurm = slurm or SlurmCli(settings.slurm.bin_dir, settings.slurm.command_timeout_s)
        self.providers: dict[str, Provider] = dict(providers or {})
        self.clock = clock
        self.actor_name = actor
        self.runner = PolicyRunner(
            load_chain(list(settings.policy.chain)), settings.policy.timeout_s
        )
        self.spool = settings.daemon.state_dir / "spool"
        # Asked before every act step: a daemon that lost leadership must not act.
        self.guard: Callable[[], bool] = lambda: True

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
        return report

    # --- the cycle ---------------------------------------------------------------------

    def _cycle(self, report: CycleReport, dry_run: bool, decide: bool) -> None:
        snapshot = self.slurm.snapshot()
        instances = self._list_instances(report)
        actor = Actor(
            self.settings, self.db, self.slurm, self._reachable(report), self.clock, self.actor_name
        )
        requests = read_requests(self.spool)
        if dry_run:
            reconciled = ReconcileReport(
                resume_requests={
                    n: tuple(j for j, ns in r.jobs.items() if n in ns)
                    for r in requests
                    if r.kind == "resume"
                    for n in r.nodes
                }
            )
        elif not self.guard():
            report.error = "no longer the leader; nothing done"
            return
        else:
            # Slurm's own view first: a node the health check powered down is failed with
            # its (Code:HEALTH) reason before the SuspendProgram request that followed it
            registered = observe_slurm(actor, snapshot.nodes)
            unhealthy = replace_unhealthy(actor, snapshot.nodes)
            implied = implied_resumes(self.db, snapshot.nodes)
            reconciled = apply_hook_requests(actor, [*requests, *implied])
            consume(requests)
            reconciled.registered, reconciled.unhealthy = registered, unhealthy
            reconcile_cloud(actor, instances, self.settings.daemon.orphan_grace_s, reconciled)
        report.reconcile = reconciled
        if not decide:
            return
        with self.db.session() as session:
            view = build_view(
                session, self.settings, snapshot, reconciled.resume_requests, self.clock()
            )
        view = view.with_proposed(self._initial_decision(view))
        report.view = view
        result = self.runner.run(view)
        if result.error:
            report.error = f"{result.error}; no scaling action this cycle"
            if not dry_run:
                self._record("policy-error", result.error)
            report.plan = Plan()
            return
        plan = clamp(result.decision, view, self.settings)
        report.plan = plan
        if dry_run:
            return
        if not self.guard():
            report.error = "no longer the leader; the plan was not applied"
            return
        self._act(actor, view, plan, reconciled, report)

    def _initial_decision(self, view: ClusterView) -> ScaleDecision:
        """Slurm's resume requests are demand before any policy speaks."""
        by_template: dict[str, list[str]] = {}
        for name in sorted(view.resume_requests):
            node = view.nodes.get(name)
            if (
                node
                and node.template
                and node.state in (NodeState.POWERED_DOWN, NodeState.REQUESTED)
            ):
                by_template.setdefault(node.template, []).append(name)
        launches = []
        for template, names in sorted(by_template.items()):
            jobs = sorted({j for n in names for j in view.resume_requests[n]})
            reason = "Slurm resume request" + (f" for jobs {','.join(jobs)}" if jobs else "")
            launches.append(
                Launch(template, len(names), reason, jobs=tuple(jobs), nodes=tuple(names))
            )
        return ScaleDecision(launches=tuple(launches))

    def _act(
        self,
        actor: Actor,
        view: ClusterView,
        plan: Plan,
        reconciled: ReconcileReport,
        report: CycleReport,
    ) -> None:
        for request_id, names in sorted(reconciled.relaunch.items()):
            template = view.nodes[names[0]].template or ""
            order = LaunchOrder(
                template,
                tuple(sorted(names)),
                view.nodes[names[0]].market or "on-demand",
                request_id,
                "retrying an interrupted launch",
            )
            self._launch(actor, order, report, begin=False)
        self._refuse(actor, view, plan, report)
        for order in plan.launches:
            self._launch(actor, order, report, begin=True)
        actor.stop(plan.stops)
        report.stopped = [s.node for s in plan.stops]
        self._hold_policy_nodes(actor, view, plan)
        for refusal in plan.refusals:
            self._record("refusal", f"{refusal.template}: {refusal.reason}")

    def _launch(self, actor: Actor, order: LaunchOrder, report: CycleReport, begin: bool) -> None:
        if not self.guard():
            report.error = "lost leadership during the cycle; remaining launches skipped"
            return
        if begin:
            actor.begin_launch(order)
        outcome = actor.launch(order)
        actor.tell_slurm_launched(order, outcome.launched)
        report.launched.extend(outcome.launched)
        if outcome.failed:
            actor.fail(outcome.failed)
            report.failed.update(outcome.failed)
            self._fall_back(actor, outcome, report)

    def _fall_back(self, actor: Actor, outcome: LaunchOutcome, report: CycleReport) -> None:
        """Capacity ran out along the template's types and zones: try the next template."""
        if not any(e.kind.value == "CAPACITY" for e in outcome.errors):
            return
        missing = len(outcome.failed)
        template = self.settings.template(outcome.order.template)
        for fallback in template.fallback_templates:
            with self.db.session() as session:
                view = build_view(session, self.settings, self.slurm.snapshot(), {}, self.clock())
            free = view.free_slots(fallback)[:missing]
            if not free:
                continue
            order = LaunchOrder(
                fallback,
                tuple(free),
                outcome.order.market,
                new_request_id(),
                f"fallback from {template.name}: no capacity",
                outcome.order.jobs,
            )
            self._launch(actor, order, report, begin=True)
            return

    def _refuse(self, actor: Actor, view: ClusterView, plan: Plan, report: CycleReport) -> None:
        """Requested nodes the plan does not launch: power them down with the reason, so the
        jobs requeue and wait visibly instead of looping through failed resumes."""
        planned = {n for order in plan.launches for n in order.nodes}
        reasons = {r.template: r.reason for r in plan.refusals}
        refused = {}
        for node in view.nodes.values():
            if node.state is NodeState.REQUESTED and node.name not in planned:
                why = reasons.get(node.template or "", "no policy launched it")
                refused[node.name] = f"(Code:REFUSED) {why}"
        if refused:
            actor.fail(refused, terminate=False)
            report.failed.update(refused)
        for template, reason in reasons.items():
            if view.templates[template].demand_mode == "slurm":
                actor.hold(view.free_slots(template), f"clustermgr: {reason}")

    def _hold_policy_nodes(self, actor: Actor, view: ClusterView, plan: Plan) -> None:
        launching = {n for order in plan.launches for n in order.nodes}
        unheld = [
            node.name
            for node in view.burst_nodes(NodeState.POWERED_DOWN)
            if node.template is not None
            and node.template in view.templates
            and view.templates[node.template].demand_mode == "policy"
            and node.slurm is not None
            and not node.slurm.drained
            and node.name not in launching
        ]
        actor.hold(unheld, HOLD_REASON)

    # --- helpers -------------------------------------------------------------------------

    def _list_instances(self, report: CycleReport) -> dict[str, dict[str, CloudInstance]]:
        listed: dict[str, dict[str, CloudInstance]] = {}
        used = {t.provider for t in self.settings.templates}
        for name in sorted(used):
            try:
                listed[name] = self.provider(name).list_instances()
            except (ProviderError, ClusterMgrError) as exc:
                report.provider_errors[name] = str(exc)
                log.warning("listing %s failed: %s", name, exc)
        return listed

    def _reachable(self, report: CycleReport) -> dict[str, Provider]:
        return {n: p for n, p in self.providers.items() if n not in report.provider_errors}

    def _record(self, kind: str, message: str) -> None:
        try:
            with self.db.session() as session:
                session.add(
                    ClusterEvent(
                        at=self.clock(), kind=kind, source=self.actor_name, message=message
                    )
                )
        except ClusterMgrError as exc:
            log.warning("could not record %s event: %s", kind, exc)

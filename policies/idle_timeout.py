"""idle_timeout: stop burst nodes idle past break-even, at the end of a paid billing period."""

from __future__ import annotations

import math
import zlib
from datetime import timedelta

from clustermgr.policy import (
    ClusterView,
    JobShape,
    NodeState,
    NodeView,
    ReasonMemo,
    ScaleDecision,
    Stop,
    TemplateView,
    job_shape,
    nodes_on,
    why_not,
)


class IdleTimeout:
    """Stop idle nodes once keeping them costs more than stopping and booting again.

    By default (`minutes` unset) the limit is the break-even of keeping against restarting:
    a restart pays the boot (the template's `boot_timeout_s`, the longest a boot takes), so
    idling longer than a boot costs more than a restart would. With per-second or per-minute
    billing each node stops at its own point of [0, boot], drawn with density e^(t/B) (the
    randomized ski-rental rule: e/(e-1) = 1.58 times the offline optimum in expectation,
    where stopping at the boot is twice); the draw hashes the node's name and launch time,
    so the same view gives the same decision. Only as many idle nodes as were launched in
    the last boot time (the demand no idle node could take) are kept that long: an arrival
    beyond them would have to launch anyway, so the longest idle past that many stop at
    once. With coarse billing (per hour) a restart pays a whole period: the limit is that
    period. `minutes` pins a fixed idle limit instead (and keeps every idle node that long).

    Either way a node is never stopped while a pending job it could serve waits (it fits
    the template, lacks resources and is no wider than the nodes up or coming), and with
    coarse billing increments it is kept until the last `margin_s` of the period it has
    already paid for, since stopping earlier throws that time away.
    """

    name = "idle_timeout"
    reads_start_estimates = False  # the simulator need not work them out for it

    def __init__(self, minutes: float | None = None, margin_s: float = 120.0):
        self.limit = None if minutes is None else timedelta(minutes=float(minutes))
        self.margin_s = float(margin_s)

    def decide(self, view: ClusterView) -> ScaleDecision:
        wanted = {launch.template for launch in view.proposed.launches}
        stops = []
        spare = self.spare_onprem(view)
        demand = PendingDemand(view)
        surplus = self.surplus(view) if self.limit is None else {}
        for node in view.burst_nodes(NodeState.UP):
            template = view.templates.get(node.template or "")
            if template is None or not node.idle or node.idle_since is None:
                continue
            if node.template in wanted:
                continue  # demand for this template: the idle node will get a job
            idle_for = view.now - node.idle_since
            limit, why = self.limit_for(template, node)
            if node.name in surplus:
                limit, why = timedelta(0), surplus[node.name]
            if idle_for < limit or not self.period_nearly_paid(view, node, template):
                continue
            if demand.served_by(template):
                continue  # a pending job can run here: never stop what it waits for
            if template.onprem:
                if spare.get(template.name, 0) <= 0:
                    continue  # the template's min_on nodes stay on
                spare[template.name] -= 1
            minutes = idle_for.total_seconds() / 60
            stops.append(Stop(node.name, f"idle_timeout: idle {minutes:.0f} min ({why})"))
        return view.proposed.stop(*stops)

    def limit_for(self, template: TemplateView, node: NodeView) -> tuple[timedelta, str]:
        """The idle time after which `node` is stopped, and why that long."""
        if self.limit is not None:
            return self.limit, f"limit {self.limit.total_seconds() / 60:g} min"
        boot_s = template.boot_timeout_s
        minimum_s = template.billing.minimum_s
        if minimum_s > boot_s or template.billing.increment_s > 60:
            # coarse billing: a restart pays a whole period, so it is kept that long
            cost_s = max(minimum_s, boot_s, template.billing.increment_s)
            why = f"break-even: a restart is billed at least {cost_s / 60:g} min"
            return timedelta(seconds=cost_s), why
        draw = zlib.crc32(f"{node.name}@{node.launched_at}".encode()) / 2**32
        limit_s = boot_s * math.log1p(draw * (math.e - 1))
        why = f"randomized break-even {limit_s / 60:.1f} of a {boot_s / 60:g}-min boot"
        return timedelta(seconds=limit_s), why

    @staticmethod
    def surplus(view: ClusterView) -> dict[str, str]:
        """Idle nodes beyond the demand a boot's time sees, with why: per template, the
        nodes launched in the last boot time (what arrived that no idle node could take)
        is how many idle nodes a new arrival could use before its own boot would be done;
        the longest idle beyond that many are not kept for the break-even."""
        found = {}
        for name, template in view.templates.items():
            if template.onprem or template.billing.increment_s > 60:
                continue
            idle = [n for n in view.burst_nodes(NodeState.UP, name) if n.idle and n.idle_since]
            if not idle:
                continue
            since = view.now - timedelta(seconds=template.boot_timeout_s)
            recent = sum(
                1 for n in view.active_nodes(name) if n.launched_at and n.launched_at >= since
            )
            idle.sort(key=lambda n: n.idle_since or view.now, reverse=True)
            why = (
                f"{len(idle)} idle, {recent} launched in the last "
                f"{template.boot_timeout_s / 60:g} min"
            )
            for node in idle[recent:]:
                found[node.name] = why
        return found

    @staticmethod
    def spare_onprem(view: ClusterView) -> dict[str, int]:
        """Per on-prem template, how many nodes may be powered off before fewer than its
        `min_on` stay on (nodes already being stopped count as off)."""
        spare = {}
        for name, template in view.templates.items():
            if template.onprem:
                on = view.powered_on(name)
                stopping = sum(
                    1
                    for stop in view.proposed.stops
                    if (node := view.nodes.get(stop.node)) is not None and node.template == name
                )
                spare[name] = on - stopping - template.min_on
        return spare

    def period_nearly_paid(self, view: ClusterView, node: NodeView, template: TemplateView) -> bool:
        if node.launched_at is None:
            return True
        elapsed = (view.now - node.launched_at).total_seconds()
        if elapsed < template.billing.minimum_s - self.margin_s:
            return False
        increment = template.billing.increment_s
        if increment <= 60:
            return True
        left_in_period = increment - (elapsed % increment)
        return left_in_period <= self.margin_s


class PendingDemand:
    """Does a pending job wait for nodes a template's idle node could give it? Read only
    when a node is due to stop, once per template and job shape (a long queue holds few)."""

    def __init__(self, view: ClusterView):
        self.view = view
        self.answers: dict[str, bool] = {}

    def served_by(self, template: TemplateView) -> bool:
        known = self.answers.get(template.name)
        if known is None:
            known = self.answers[template.name] = self._look(template)
        return known

    def _look(self, template: TemplateView) -> bool:
        held = self.view.proposed.held
        # nodes of the template a job could have: those up or coming (not stopping)
        room = len(self.view.active_nodes(template.name))
        reasons = ReasonMemo()
        fits: dict[JobShape, bool] = {}
        for job in self.view.pending:
            if job.job_id in held or job.partition.split(",").count(template.partition) == 0:
                continue
            if not reasons.lacks_resources(job):
                continue
            shape = job_shape(job)
            fit = fits.get(shape)
            if fit is None:
                fit = fits[shape] = (
                    why_not(job, template) is None and nodes_on(job, template) <= room
                )
            if fit:
                return True
        return False

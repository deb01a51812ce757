"""idle_timeout: stop burst nodes idle too long, at the end of a paid billing period."""

from __future__ import annotations

from datetime import timedelta

from clustermgr.policy import ClusterView, NodeState, NodeView, ScaleDecision, Stop, TemplateView


class IdleTimeout:
    """Stop nodes idle for `minutes` or more, once their paid period is nearly used.

    With per-second billing any moment is fine (after the minimum charge); with coarser
    increments (per minute, per hour) a node is kept until the last `margin_s` of the
    period it has already paid for, since stopping earlier throws that time away.
    """

    name = "idle_timeout"

    def __init__(self, minutes: float = 10.0, margin_s: float = 120.0):
        self.limit = timedelta(minutes=float(minutes))
        self.margin_s = float(margin_s)

    def decide(self, view: ClusterView) -> ScaleDecision:
        wanted = {launch.template for launch in view.proposed.launches}
        stops = []
        spare = self.spare_onprem(view)
        for node in view.burst_nodes(NodeState.UP):
            template = view.templates.get(node.template or "")
            if template is None or not node.idle or node.idle_since is None:
                continue
            if node.template in wanted:
                continue  # demand for this template: the idle node will get a job
            idle_for = view.now - node.idle_since
            if idle_for >= self.limit and self.period_nearly_paid(view, node, template):
                if template.onprem:
                    if spare.get(template.name, 0) <= 0:
                        continue  # the template's min_on nodes stay on
                    spare[template.name] -= 1
                minutes = idle_for.total_seconds() / 60
                stops.append(Stop(node.name, f"idle_timeout: idle {minutes:.0f} min"))
        return view.proposed.stop(*stops)

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

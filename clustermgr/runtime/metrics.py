"""Prometheus exporter: what the daemon did and what the cluster looks like."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server
from prometheus_client import Counter as PromCounter

from clustermgr.core.errors import ClusterMgrError
from clustermgr.core.reasons import kind_of
from clustermgr.scaling.onprem import power_saved_kw

if TYPE_CHECKING:
    from clustermgr.policy.fit import BurstDemand
    from clustermgr.scaling.engine import CycleReport


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.nodes = Gauge(
            "clustermgr_nodes", "Nodes by state", ["state", "template", "provider"], registry=r
        )
        self.launches = PromCounter(
            "clustermgr_launches", "Nodes launched", ["template", "provider"], registry=r
        )
        self.terminations = PromCounter(
            "clustermgr_terminations",
            "Nodes stopped or failed",
            ["template", "provider"],
            registry=r,
        )
        self.errors = PromCounter("clustermgr_errors", "Errors by kind", ["kind"], registry=r)
        self.cycle_seconds = Histogram(
            "clustermgr_cycle_duration_seconds",
            "Scaling cycle duration",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
            registry=r,
        )
        self.pending_jobs = Gauge(
            "clustermgr_pending_jobs", "Pending jobs a cloud template fits", registry=r
        )
        self.pending_gpus = Gauge(
            "clustermgr_pending_gpus",
            "GPUs wanted by pending jobs a cloud template fits",
            registry=r,
        )
        self.hourly_cost = Gauge(
            "clustermgr_estimated_hourly_cost_dollars", "Running cloud nodes, $/hour", registry=r
        )
        self.power_saved = Gauge(
            "clustermgr_onprem_power_saved_kw",
            "Estimated kW saved: powered-off on-prem nodes x their template's idle_kw",
            registry=r,
        )
        self.protected = Gauge(
            "clustermgr_template_protected",
            "1 while a template is in protected mode (launch/boot failures in a row)",
            ["template"],
            registry=r,
        )
        self.foreign = Gauge(
            "clustermgr_foreign_instances",
            "Instances with the cluster's tags that cm-scale never launched (left alone)",
            ["provider"],
            registry=r,
        )
        self.foreign_providers: set[str] = set()  # the providers the foreign gauge shows
        self.leader = Gauge("clustermgr_leader", "1 when this daemon is the leader", registry=r)
        self.last_cycle = Gauge(
            "clustermgr_last_cycle_timestamp_seconds", "End of the last cycle", registry=r
        )

    def prime(self, templates: list[tuple[str, str]], kinds: list[str]) -> None:
        """Create every labelled series at zero, so dashboards see them before any event."""
        for template, provider in templates:
            self.launches.labels(template, provider).inc(0)
            self.protected.labels(template).set(0)
            self.terminations.labels(template, provider).inc(0)
            self.foreign.labels(provider).set(0)
            self.foreign_providers.add(provider)
        for kind in kinds:
            self.errors.labels(kind=kind).inc(0)

    def serve(self, address: str, port: int) -> int:
        try:
            server, _thread = start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            raise ClusterMgrError(
                f"metrics endpoint {address}:{port}: {exc.strerror or exc} (another cm-scale "
                "or exporter there?); set [daemon] metrics_port to a free port, or 0 for none"
            ) from None
        return int(server.server_address[1])

    def observe_cycle(self, report: CycleReport, demand: BurstDemand | None = None) -> None:
        self.cycle_seconds.observe(report.duration_s)
        self.last_cycle.set_to_current_time()
        if report.error:
            self.errors.labels(kind="CYCLE").inc()
        self.observe_foreign(report)
        view = report.view
        if view is None:
            return
        for name in report.launched:
            node = view.nodes.get(name)
            template = view.templates.get(node.template or "") if node else None
            if template:
                self.launches.labels(template.name, template.provider).inc()
        for name in [*report.stopped, *report.failed]:
            node = view.nodes.get(name)
            template = view.templates.get(node.template or "") if node else None
            if template:
                self.terminations.labels(template.name, template.provider).inc()
        for reason in report.failed.values():
            kind = kind_of(reason)
            if kind:
                self.errors.labels(kind=kind).inc()
        if demand is not None:
            self.pending_jobs.set(demand.jobs)
            self.pending_gpus.set(demand.gpus)
        self.power_saved.set(power_saved_kw(view))
        for template in view.templates.values():
            self.protected.labels(template.name).set(1 if template.protected else 0)

    def observe_foreign(self, report: CycleReport) -> None:
        """Foreign instances per provider listed this cycle (one not listed keeps its count)."""
        judgment = report.judgment
        if judgment is None:
            return
        self.foreign_providers.update(judgment.foreign)
        for provider in sorted(self.foreign_providers - set(report.provider_errors)):
            self.foreign.labels(provider).set(len(judgment.foreign.get(provider, ())))

    def observe_nodes(self, counts: Counter[tuple[str, str, str]]) -> None:
        self.nodes.clear()
        for (state, template, provider), count in counts.items():
            self.nodes.labels(state, template, provider).set(count)

"""The scaling engine's side of the directors: the gate (templates whose region waits for
its director launch nothing) and the demand the director lifecycle is driven by.

Gate: a template whose region has a `required` director that is not READY carries the
`(Code:DIRECTOR) waiting for director NAME (STATE)` reason in `TemplateView.waiting`; clamp
refuses its launches with it (the nodes stay held, the jobs pending, no instance is
created), and a policy may ask another region's template instead.

Demand: a provider's region has burst demand while nodes of its templates are active or
requested, the plan launches or refuses nodes of them, or a pending job fits one of its
templates that waits for the director (a job Slurm cannot place on held slots asks nothing
more, so the plan alone would forget it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from clustermgr.nodes.states import ACTIVE_CLOUD_STATES, NodeState
from clustermgr.policy.fit import JobShape, job_shape, serving_templates, why_not
from clustermgr.policy.view import ClusterView
from clustermgr.scaling.clamp import Plan

DEMAND_STATES = ACTIVE_CLOUD_STATES | {NodeState.REQUESTED}


def with_waits(view: ClusterView, waiting: Mapping[str, str]) -> ClusterView:
    """The view with each waiting template's `(Code:DIRECTOR)` or `(Code:IMAGE)` reason set."""
    if not waiting:
        return view
    templates = {
        name: replace(t, waiting=waiting[name]) if name in waiting else t
        for name, t in view.templates.items()
    }
    return replace(view, templates=templates)


def providers_in_demand(view: ClusterView, plan: Plan | None) -> frozenset[str]:
    """Provider names whose region has burst demand this cycle."""
    provider_of = {name: t.provider for name, t in view.templates.items()}
    wanted: set[str] = set()
    for node in view.burst_nodes():
        if node.state in DEMAND_STATES and node.template in provider_of:
            wanted.add(provider_of[node.template or ""])
    if plan is not None:
        for order in plan.launches:
            wanted.add(provider_of.get(order.template, ""))
        for refusal in plan.refusals:
            wanted.add(provider_of.get(refusal.template, ""))
    waiting = {name: t for name, t in view.templates.items() if t.waiting}
    if waiting:
        seen: set[JobShape] = set()
        for job in view.pending:
            shape = job_shape(job)
            if shape in seen:
                continue
            seen.add(shape)
            for template in serving_templates(job, waiting):
                if why_not(job, template) is None:
                    wanted.add(template.provider)
    wanted.discard("")
    return frozenset(wanted)


def waiting_summary(view: ClusterView | None) -> list[str]:
    """One phrase per director burst nodes wait for, for the cycle summary."""
    if view is None:
        return []
    reasons = sorted({t.waiting for t in view.templates.values() if t.waiting})
    return [r.split(") ", 1)[-1] for r in reasons]

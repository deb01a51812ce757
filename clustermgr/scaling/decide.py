"""The decide step, one function for cm-scale and `clustermgr simulate`: the view (the
snapshot with this cycle's verdicts applied, protection counted) -> Slurm's resume requests
as the first demand -> the policy chain -> clamp (limits, capacity alternates) -> every
pending job accounted for. No I/O: the engine acts on the plan, the simulator models it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clustermgr.config import Settings
from clustermgr.nodes.states import NodeState
from clustermgr.policy.chain import PolicyRunner
from clustermgr.policy.decision import Launch, ScaleDecision
from clustermgr.policy.view import ClusterView
from clustermgr.scaling.accounting import account_jobs
from clustermgr.scaling.clamp import Plan, clamp
from clustermgr.scaling.directors import with_waits
from clustermgr.scaling.observe import Snapshot
from clustermgr.scaling.projection import build_view
from clustermgr.scaling.reconcile import Judgment, reconcile


@dataclass
class Decided:
    view: ClusterView  # with `proposed` set to the resume requests
    plan: Plan = field(default_factory=Plan)
    error: str | None = None  # the policy chain failed: no plan this cycle


def judge(settings: Settings, snapshot: Snapshot) -> tuple[Judgment, ClusterView]:
    """Snapshot -> verdicts -> the view policies see (this cycle's failures counted toward
    protection, directors' waits applied)."""
    judgment = reconcile(settings, snapshot, settings.daemon.orphan_grace_s)
    view = with_waits(build_view(settings, snapshot, judgment), snapshot.director_waits)
    return judgment, view


def decide(settings: Settings, runner: PolicyRunner, view: ClusterView) -> Decided:
    """View -> resume requests -> chain -> clamp -> job accounting."""
    view = view.with_proposed(initial_decision(view))
    result = runner.run(view)
    if result.error:
        return Decided(view, error=result.error)
    plan = clamp(result.decision, view, settings)
    plan.jobs = account_jobs(view, result.decision, plan)
    return Decided(view, plan)


def initial_decision(view: ClusterView) -> ScaleDecision:
    """Slurm's resume requests (and slots still REQUESTED from an earlier cycle) are demand
    before any policy speaks. On an all-or-nothing template, each job's nodes (as
    SLURM_RESUME_FILE named them) are a launch of their own, together."""
    by_template: dict[str, list[str]] = {}
    for node in sorted(view.burst_nodes(NodeState.REQUESTED), key=lambda n: n.name):
        if node.template:
            by_template.setdefault(node.template, []).append(node.name)
    launches = []
    for template, names in sorted(by_template.items()):
        loose = names
        if view.templates[template].all_or_nothing:
            groups, loose = job_groups(view, names)
            for job, group in groups.items():
                reason = f"Slurm resume request for job {job}: {len(group)} nodes together"
                launches.append(
                    Launch(template, len(group), reason, jobs=(job,), nodes=group, together=True)
                )
        if loose:
            jobs = sorted({j for n in loose for j in view.resume_requests.get(n, ())})
            reason = "Slurm resume request" + (f" for jobs {','.join(jobs)}" if jobs else "")
            launches.append(
                Launch(template, len(loose), reason, jobs=tuple(jobs), nodes=tuple(loose))
            )
    return ScaleDecision(launches=tuple(launches))


def job_groups(view: ClusterView, names: list[str]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """The nodes of each job that asked for more than one of `names` (a node goes with the
    first job named for it), and the nodes no such job holds. A node whose resume request
    has not reached cm-scale yet (Slurm showed it powering up first: "a resume request we
    missed") goes with the job Slurm is configuring on it."""
    by_job: dict[str, list[str]] = {}
    configuring: dict[str, str] | None = None
    for name in names:
        jobs = view.resume_requests.get(name, ())
        job = jobs[0] if jobs else None
        if job is None:
            if configuring is None:
                configuring = {n: j.job_id for j in view.running for n in j.nodes}
            job = configuring.get(name)
        if job:
            by_job.setdefault(job, []).append(name)
    groups = {job: tuple(group) for job, group in by_job.items() if len(group) > 1}
    grouped = {n for group in groups.values() for n in group}
    return groups, [n for n in names if n not in grouped]

"""A plan as rows: what `policy dry-run` and `cm-scale --dry-run` print."""

from __future__ import annotations

from typing import Any

from clustermgr.cli.output import echo, emit
from clustermgr.nodes.states import NodeState
from clustermgr.scaling.clamp import LaunchOrder, Plan
from clustermgr.scaling.engine import CycleReport
from clustermgr.scaling.ownership import FOREIGN_VERDICT
from clustermgr.scaling.reconcile import Judgment

PLAN_KEYS = ("action", "target", "count", "market", "reason")
SHOWN_JOBS = 8


def job_list(jobs: tuple[str, ...]) -> str:
    shown = ",".join(jobs[:SHOWN_JOBS])
    more = f" (+{len(jobs) - SHOWN_JOBS} more)" if len(jobs) > SHOWN_JOBS else ""
    return f"job{'s' if len(jobs) > 1 else ''} {shown}{more}"


def verdict_rows(judgment: Judgment) -> list[dict[str, Any]]:
    """What reconcile found, as the same rows: one per node verdict that changes something,
    one per orphan sweep, one per foreign instance (left alone) and per interrupted launch
    re-issued, one per provider's spent per-launch placement groups."""
    rows: list[dict[str, Any]] = [
        {
            "action": f"verdict:{judged.verdict}",
            "target": judged.node,
            "count": 1,
            "market": None,
            "reason": judged.reason
            or f"{judged.state.value}, cloud {judged.cloud}, Slurm {judged.slurm}",
        }
        for judged in judgment.acting
    ]
    rows.extend(
        {
            "action": "verdict:orphan",
            "target": provider,
            "count": len(ids),
            "market": None,
            "reason": "terminate instances no node holds: " + ",".join(ids),
        }
        for provider, ids in sorted(judgment.orphans.items())
    )
    rows.extend(
        {
            "action": "verdict:foreign",
            "target": found.provider,
            "count": 1,
            "market": None,
            "reason": f"leave {found.instance_id} alone: {FOREIGN_VERDICT} "
            f"(template tag {found.template or '-'}, request tag {found.request_id or '-'}"
            + (f", role tag {found.role}" if found.role else "")
            + ")",
        }
        for provider, instances in sorted(judgment.foreign.items())
        for found in instances
    )
    rows.extend(
        {
            "action": "verdict:power-off",
            "target": provider,
            "count": len(names),
            "market": None,
            "reason": "on at the BMC while Slurm has them powered down: " + ",".join(names),
        }
        for provider, names in sorted(judgment.strays.items())
    )
    rows.extend(
        {"action": "verdict:down", "target": node, "count": 1, "market": None, "reason": fault}
        for node, fault in sorted(judgment.faults.items())
    )
    rows.extend(
        {
            "action": "verdict:placement-group",
            "target": provider,
            "count": len(groups),
            "market": None,
            "reason": "delete placement groups no launch needs: "
            + ",".join(g.name for g in groups),
        }
        for provider, groups in sorted(judgment.spent_groups.items())
    )
    return rows


def alternates(order: LaunchOrder) -> str:
    """Where the order's nodes go if the cloud has no capacity, and what that cannot cover."""
    text = "".join(f"; no capacity: {a.template} [{','.join(a.nodes)}]" for a in order.alternates)
    return text + (f"; {order.cut}" if order.cut else "")


def plan_rows(plan: Plan) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for order in plan.launches:
        rows.append(
            {
                "action": "launch",
                "target": order.template,
                "count": len(order.nodes),
                "market": order.market,
                "reason": f"{order.reason} [{','.join(order.nodes)}]" + alternates(order),
            }
        )
    rows.extend(
        {"action": "stop", "target": s.node, "count": 1, "market": None, "reason": s.reason}
        for s in plan.stops
    )
    rows.extend(
        {
            "action": "refuse",
            "target": r.template,
            "count": None,
            "market": None,
            "reason": r.reason,
        }
        for r in plan.refusals
    )
    rows.extend(
        {
            "action": fate.status,  # served (by a launch above), waiting, refused, unfit, ...
            "target": job_list(fate.jobs),
            "count": fate.tasks,  # a pending array counts its tasks
            "market": None,
            "reason": fate.reason,
            "jobs": list(fate.jobs),  # --json: every job id (the table shows a few)
            "tasks": fate.tasks,
        }
        for fate in plan.jobs
    )
    rows.extend(
        {"action": "note", "target": "-", "count": None, "market": None, "reason": note}
        for note in plan.notes
    )
    return rows


def cycle_rows(plan: Plan, judgment: Judgment | None) -> list[dict[str, Any]]:
    """A dry run's output: the verdicts, then the plan."""
    return (verdict_rows(judgment) if judgment else []) + plan_rows(plan)


def emit_plan(report: CycleReport, as_json: bool) -> None:
    """A dry run's plan; with no pending job and nothing to do, a line saying so and what
    was seen (JSON: the empty list)."""
    assert report.plan is not None
    rows = cycle_rows(report.plan, report.judgment)
    view = report.view
    if rows or as_json or view is None or view.pending:
        emit(rows, PLAN_KEYS, as_json, "Plan")
        return
    burst = view.burst_nodes()
    up = sum(1 for n in burst if n.state is NodeState.UP)
    down = sum(1 for n in burst if n.state is NodeState.POWERED_DOWN)
    echo(
        f"nothing pending: no plan (Slurm lists {report.slurm_nodes} nodes; cm-scale "
        f"manages {len(burst)}: {up} up, {down} powered down, {len(burst) - up - down} other)"
    )

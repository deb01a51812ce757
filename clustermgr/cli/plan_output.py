"""A plan as rows: what `policy dry-run` and `cm-scale --dry-run` print."""

from __future__ import annotations

from typing import Any

from clustermgr.scaling.clamp import Plan

PLAN_KEYS = ("action", "target", "count", "market", "reason")


def plan_rows(plan: Plan) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for order in plan.launches:
        rows.append(
            {
                "action": "launch",
                "target": order.template,
                "count": len(order.nodes),
                "market": order.market,
                "reason": f"{order.reason} [{','.join(order.nodes)}]",
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
        {"action": "hold", "target": f"job {job}", "count": None, "market": None, "reason": why}
        for job, why in sorted(plan.held.items())
    )
    rows.extend(
        {"action": "unfit", "target": f"job {job}", "count": None, "market": None, "reason": why}
        for job, why in sorted(plan.unfit.items())
    )
    rows.extend(
        {"action": "note", "target": "-", "count": None, "market": None, "reason": note}
        for note in plan.notes
    )
    return rows

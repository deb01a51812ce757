"""`clustermgr policy dry-run`: the decision the current real state would produce."""

from __future__ import annotations

import click

from clustermgr.cli.context import AppContext


@click.group()
def policy() -> None:
    """Scaling policies."""


@policy.command("dry-run")
@click.option("--policy", "only", help="Run only this policy (from the chain, or built in).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def dry_run(app: AppContext, only: str | None, as_json: bool) -> None:
    """Observe Slurm and the clouds, run the policy chain, print the plan; change nothing."""
    from clustermgr.cli.plan_output import emit_plan
    from clustermgr.config import PolicyRef
    from clustermgr.core.errors import ClusterMgrError
    from clustermgr.scaling.engine import Engine

    settings = app.settings()
    if only:
        chain = [r for r in settings.policy.chain if r.name == only] or [PolicyRef(name=only)]
        settings = settings.model_copy(
            update={"policy": settings.policy.model_copy(update={"chain": chain})}
        )
    engine = Engine(settings, app.database(), actor="policy-dry-run")
    from clustermgr.cli.config_cmd import warn_slurm_mismatches

    warn_slurm_mismatches(app, "policy dry-run")
    report = engine.cycle(dry_run=True)
    if report.error:
        raise ClusterMgrError(report.error)
    emit_plan(report, as_json)

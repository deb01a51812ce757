"""`clustermgr health-check`: install as Slurm's HealthCheckProgram on burst nodes."""

from __future__ import annotations

import click

from clustermgr.cli.context import AppContext


@click.command("health-check")
@click.option("--node", help="Slurm node name [default: $SLURMD_NODENAME or the hostname].")
@click.option("--slurm-bin", default="/usr/bin", show_default=True, help="Where scontrol is.")
@click.pass_obj
def health_check(app: AppContext, node: str | None, slurm_bin: str) -> None:
    """Check this burst node's GPUs against its Slurm definition (exit 1 when unhealthy)."""
    from pathlib import Path

    from clustermgr.workload.gpu_health import health_check as check
    from clustermgr.workload.gpu_health import node_name

    result = check(node_name(node, Path(slurm_bin)), Path(slurm_bin))
    if not result.checked:
        return  # not a burst node: nothing to check
    if result.problems:
        click.echo(f"{result.node}: unhealthy ({result.action}): {'; '.join(result.problems)}")
        raise SystemExit(1)
    click.echo(f"{result.node}: healthy")

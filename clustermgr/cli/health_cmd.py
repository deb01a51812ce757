"""`clustermgr health-check`: install as Slurm's HealthCheckProgram on burst nodes."""

from __future__ import annotations

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo


@click.command("health-check")
@click.option("--node", help="Slurm node name [default: $SLURMD_NODENAME or the hostname].")
@click.option("--slurm-bin", default="/usr/bin", show_default=True, help="Where scontrol is.")
@click.option(
    "--node-env",
    default="/etc/clustermgr/node.env",
    show_default=True,
    help="The image and revision this node booted (written by the image's user-data).",
)
@click.pass_obj
def health_check(app: AppContext, node: str | None, slurm_bin: str, node_env: str) -> None:
    """Check this burst node's GPUs against its Slurm definition (exit 1 when unhealthy)
    and report its image revision and kernel to Slurm (its Extra field)."""
    from pathlib import Path

    from clustermgr.workload.gpu_health import MARKER_DIR, node_name
    from clustermgr.workload.gpu_health import health_check as check

    name = node_name(node, Path(slurm_bin))
    result = check(name, Path(slurm_bin), MARKER_DIR, Path(node_env))
    if not result.checked:
        return  # not a burst node: nothing to check
    if result.reported:
        echo(f"{result.node}: {result.reported}")
    if result.problems:
        echo(f"{result.node}: unhealthy ({result.action}): {'; '.join(result.problems)}")
        raise SystemExit(1)
    echo(f"{result.node}: healthy")

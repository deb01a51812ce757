"""`clustermgr slurm resume|suspend|resume-fail HOSTLIST` (Slurm's power-save hooks) and
`clustermgr slurm conf` (the slurm.conf and gres.conf lines for the templates)."""

from __future__ import annotations

import os

import click

from clustermgr.cli.context import AppContext


@click.group()
def slurm() -> None:
    """Slurm integration: power-save hooks and generated configuration."""


def _hook(app: AppContext, kind: str, hostlist: str) -> None:
    from clustermgr.cli.paths import config_path
    from clustermgr.workload.hooks import record

    request = record(
        kind, hostlist, config_path(app.config_path), os.environ.get("SLURM_RESUME_FILE")
    )
    del request  # recorded; Slurm only needs our exit status


@slurm.command()
@click.argument("hostlist")
@click.pass_obj
def resume(app: AppContext, hostlist: str) -> None:
    """ResumeProgram: record a resume request for cm-scale and return at once."""
    _hook(app, "resume", hostlist)


@slurm.command()
@click.argument("hostlist")
@click.pass_obj
def suspend(app: AppContext, hostlist: str) -> None:
    """SuspendProgram: record a power-down request for cm-scale and return at once."""
    _hook(app, "suspend", hostlist)


@slurm.command("resume-fail")
@click.argument("hostlist")
@click.pass_obj
def resume_fail(app: AppContext, hostlist: str) -> None:
    """ResumeFailProgram: record that Slurm gave up on these nodes."""
    _hook(app, "resume-fail", hostlist)


@slurm.command()
@click.pass_obj
def conf(app: AppContext) -> None:
    """Print slurm.conf and gres.conf lines for every template, with the power-save settings."""
    from clustermgr.workload.slurmconf import render_slurm_conf

    for line in render_slurm_conf(app.settings()):
        click.echo(line)

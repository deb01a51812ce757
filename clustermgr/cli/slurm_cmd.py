"""`clustermgr slurm resume|suspend|resume-fail HOSTLIST` (Slurm's power-save hooks) and
`clustermgr slurm conf` (the slurm.conf and gres.conf lines for the templates)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo
from clustermgr.core.errors import UsageError


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
@click.option(
    "--topology",
    "topology",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write topology.conf here (atomically, 0644) and print TopologyPlugin=.",
)
@click.option(
    "--site-topology",
    "site",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The site's own topology.conf for its on-prem fabric, merged under cm-top.",
)
@click.pass_obj
def conf(app: AppContext, topology: Path | None, site: Path | None) -> None:
    """Print slurm.conf and gres.conf lines for every template, with the power-save settings;
    with --topology, write topology.conf too (one leaf switch per placement block)."""
    from clustermgr.workload.slurmconf import render_slurm_conf
    from clustermgr.workload.topology import PLUGIN_LINE

    settings = app.settings()
    lines = render_slurm_conf(settings)
    if site is not None and topology is None:
        raise UsageError("--site-topology needs --topology PATH (where to write the result)")
    if topology is not None:
        count = _write_topology(app, topology, site)
        lines = [*lines, f"# topology.conf: {topology} ({count} switches)", PLUGIN_LINE]
    for line in lines:
        echo(line)


def _write_topology(app: AppContext, path: Path, site: Path | None) -> int:
    from clustermgr.workload.topology import parse_site, render_topology, write_conf

    switches = []
    if site is not None:
        try:
            text = site.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--site-topology {site}: cannot read it: {exc}") from None
        switches = parse_site(text, str(site))
    onprem = _inventory_onprem(app)
    if onprem is None and site is None:
        echo(
            "warning: no node database yet, so no on-prem nodes from the inventory in "
            "topology.conf: run `clustermgr nodes sync` first, or give --site-topology",
            err=True,
        )
    lines = render_topology(app.settings(), onprem or [], switches)
    write_conf(path, lines)
    return sum(line.startswith("SwitchName=") for line in lines)


def _inventory_onprem(app: AppContext) -> list[str] | None:
    """The on-prem nodes `nodes sync` registered from Slurm (None: no database yet)."""
    from sqlalchemy import select

    from clustermgr.db.models import Node
    from clustermgr.nodes.states import NodeState

    database = app.existing_database()
    if database is None:
        return None
    query = select(Node.name).where(Node.kind == "onprem", Node.state != NodeState.RETIRED.value)
    with database.session() as session:
        return list(session.scalars(query))

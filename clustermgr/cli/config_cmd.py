"""`clustermgr config check`."""

from __future__ import annotations

import click

from clustermgr.cli.context import AppContext


@click.group()
def config() -> None:
    """Configuration file."""


@config.command()
@click.pass_obj
def check(app: AppContext) -> None:
    """Validate the configuration; exit 2 with one line naming the problem."""
    from clustermgr.config import config_path

    settings = app.settings()
    slots = sum(len(t.node_names) for t in settings.templates)
    click.echo(
        f"{config_path(app.config_path)}: OK ({len(settings.providers)} providers, "
        f"{len(settings.templates)} templates, {slots} cloud node slots)"
    )

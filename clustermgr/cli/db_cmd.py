"""`clustermgr db upgrade|current|prune`."""

from __future__ import annotations

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, emit_json


@click.group()
def db() -> None:
    """Database schema: apply migrations, show the revision."""


@db.command()
@click.pass_obj
def upgrade(app: AppContext) -> None:
    """Apply every pending schema migration."""
    from clustermgr.cli.privilege import require_root

    require_root("db upgrade")
    from clustermgr.db.database import redact

    database = app.database(check_schema=False)
    before, after = database.upgrade()
    if before == after:
        echo(f"{redact(database.url)}: schema already at {after}")
    else:
        echo(f"{redact(database.url)}: schema upgraded {before or 'empty'} -> {after}")


@db.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def current(app: AppContext, as_json: bool) -> None:
    """Show the schema revision of the database and of this clustermgr."""
    from clustermgr.db.database import head_revision, redact

    database = app.database(check_schema=False)
    revision, head = database.current_revision(), head_revision()
    if as_json:
        emit_json(
            {
                "database": redact(database.url),
                "current": revision,
                "head": head,
                "up_to_date": revision == head,
            }
        )
        return
    status = "up to date" if revision == head else "out of date: run `clustermgr db upgrade`"
    echo(f"{redact(database.url)}: {revision or 'empty'} (head {head}, {status})")


@db.command()
@click.option(
    "--days",
    type=click.FloatRange(min=0, min_open=True),
    help="Default: [database] retention_days.",
)
@click.pass_obj
def prune(app: AppContext, days: float | None) -> None:
    """Delete history older than the retention period now (cm-scale does it on its own
    every [database] prune_interval_s): node transitions, cluster events, spent launch
    request ids. Cost records and staging records are kept."""
    from clustermgr.cli.privilege import require_root

    require_root("db prune")
    from datetime import UTC, datetime

    from clustermgr.db.retention import prune as prune_now

    settings = app.settings()
    keep = days if days is not None else settings.database.retention_days
    pruned = prune_now(app.database(), keep, datetime.now(UTC))
    echo(f"pruned, older than {keep:g} days: {pruned.summary()}")

"""`clustermgr db upgrade|current`."""

from __future__ import annotations

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import emit_json


@click.group()
def db() -> None:
    """Database schema: apply migrations, show the revision."""


@db.command()
@click.pass_obj
def upgrade(app: AppContext) -> None:
    """Apply every pending schema migration."""
    from clustermgr.cli.privilege import require_root

    require_root("db upgrade")
    from clustermgr.db.engine import redact

    database = app.database(check_schema=False)
    before, after = database.upgrade()
    if before == after:
        click.echo(f"{redact(database.url)}: schema already at {after}")
    else:
        click.echo(f"{redact(database.url)}: schema upgraded {before or 'empty'} -> {after}")


@db.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def current(app: AppContext, as_json: bool) -> None:
    """Show the schema revision of the database and of this clustermgr."""
    from clustermgr.db.engine import head_revision, redact

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
    click.echo(f"{redact(database.url)}: {revision or 'empty'} (head {head}, {status})")

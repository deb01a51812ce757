"""`clustermgr ldap sync|status`: LDAP replication to the directors (docs/directors.md)."""

from __future__ import annotations

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, emit, emit_json
from clustermgr.core.errors import ConfigError


@click.group()
def ldap() -> None:
    """The directors' LDAP replicas: syncrepl consumers of the head, or pulled copies."""


@ldap.command()
@click.option("--director", "director", metavar="NAME", help="Only this director.")
@click.option(
    "--full",
    is_flag=True,
    help="pull: a full sync instead of an incremental one; syncrepl: re-seed the consumer.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def sync(app: AppContext, director: str | None, full: bool, as_json: bool) -> None:
    """Replicate the head's LDAP bases to every director with an address (or one)."""
    from clustermgr.cli.privilege import require_root

    require_root("ldap sync")
    from clustermgr.ldap.connection import check_passwords
    from clustermgr.ldap.sync import sync_director, targets

    settings = app.settings()
    if settings.ldap is None:
        raise ConfigError(
            f"{app.config_path or 'the config'}: no [ldap] table: LDAP replication is not "
            "configured (see etc/clustermgr.toml.example)"
        )
    check_passwords(settings.ldap)
    database = app.database()
    with database.session() as session:
        chosen = targets(session, director)
    outcomes = [sync_director(database, settings.ldap, target, full=full) for target in chosen]
    if as_json:
        emit_json([o.as_json() for o in outcomes])
    elif not outcomes:
        echo("ldap sync: no director has an address yet")
    for outcome in outcomes:
        if not as_json:
            echo(outcome.summary())
    if any(o.state != "ok" for o in outcomes):
        raise SystemExit(1)


@ldap.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status(app: AppContext, as_json: bool) -> None:
    """Each director's replica: mode, state, lag, last success, entries, error."""
    from clustermgr.ldap.sync import STATUS_COLUMNS, status_rows

    with app.database(validate_config=False).session() as session:
        rows = status_rows(session)
    emit(rows, STATUS_COLUMNS, as_json, "LDAP replicas")

"""`clustermgr transfers list|show`: cmsub's stage-in and stage-out records."""

from __future__ import annotations

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, emit, emit_fields, emit_json
from clustermgr.core.errors import NotFoundError

COLUMNS = (
    "id",
    "job_id",
    "direction",
    "user",
    "transport",
    "state",
    "files_total",
    "files_verified",
    "bytes_total",
    "finished_at",
    "error",
)


@click.group()
def transfers() -> None:
    """cmsub data transfers (stage-in and stage-out jobs)."""


@transfers.command("list")
@click.option("--user", default=None, help="Only this user's transfers.")
@click.option("--limit", default=200, show_default=True, help="The newest N.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_transfers(app: AppContext, user: str | None, limit: int, as_json: bool) -> None:
    """The newest transfers first."""
    from clustermgr.staging import records

    with app.database(validate_config=False).session() as session:
        rows = [records.view(r).row() for r in records.listing(session, user, limit)]
    emit(rows, COLUMNS, as_json, "Transfers")


@transfers.command()
@click.argument("transfer_or_job")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show(app: AppContext, transfer_or_job: str, as_json: bool) -> None:
    """One chain's transfers, by a job id of the chain (or a transfer's #id)."""
    from clustermgr.db.models import Transfer
    from clustermgr.staging import records

    with app.database(validate_config=False).session() as session:
        rows = records.rows_for_job(session, transfer_or_job)
        if not rows and transfer_or_job.lstrip("#").isdigit():
            one = session.get(Transfer, int(transfer_or_job.lstrip("#")))
            rows = records.chain_rows(session, one.stage_id) if one else []
        found = [records.view(r).row() for r in rows]
    if not found:
        raise NotFoundError(f"no transfer or cmsub job {transfer_or_job!r}")
    if as_json:
        emit_json({"stage_id": found[0]["stage_id"], "transfers": found})
        return
    for row in found:
        echo(f"[stage-{row['direction']}]")
        emit_fields(row, indent="  ")

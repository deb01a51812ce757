"""`clustermgr directors list|show`: the per-region cloud directors, their state, events
and replicas (docs/directors.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, emit, emit_fields, emit_json, emit_table
from clustermgr.core.errors import NotFoundError

LIST_COLUMNS = (
    "name",
    "provider",
    "region",
    "state",
    "address",
    "instance_id",
    "healthy_at",
    "image_state",
    "ldap_state",
)
EVENT_COLUMNS = ("at", "old_state", "new_state", "reason", "actor")
IMAGE_COLUMNS = ("image", "version", "state", "bytes_sent", "verified_at", "error")


@click.group()
def directors() -> None:
    """Per-region cloud directors (image and LDAP replicas for burst nodes)."""


@directors.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_directors(app: AppContext, as_json: bool) -> None:
    """Every director: state, address, instance, last healthy check, replica states."""
    from sqlalchemy import select

    from clustermgr.db.models import Director

    with app.database().session() as session:
        rows = [
            _summary(session, row)
            for row in session.scalars(select(Director).order_by(Director.name))
        ]
    emit([_plain(r) for r in rows] if as_json else rows, LIST_COLUMNS, as_json, "Directors")


@directors.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show(app: AppContext, name: str, as_json: bool) -> None:
    """One director: its row, its events (oldest first) and its replicas."""
    from clustermgr.directors.states import find

    with app.database().session() as session:
        row = find(session, name)
        if row is None:
            raise NotFoundError(f"no director named {name!r} (see `clustermgr directors list`)")
        detail = _summary(session, row)
        detail.update(
            request_id=row.request_id,
            instance_type=row.instance_type,
            state_reason=row.state_reason,
            state_since=row.state_since,
            launched_at=row.launched_at,
            idle_since=row.idle_since,
            health=row.health,
        )
        events = [
            {
                "at": e.at,
                "old_state": e.old_state,
                "new_state": e.new_state,
                "reason": e.reason,
                "actor": e.actor,
            }
            for e in row.events
        ]
        images = _image_replicas(session, row.id)
        ldap = _ldap_replica(session, row.id)
    if as_json:
        emit_json(
            {
                **_plain(detail),
                "events": [_plain(e) for e in events],
                "image_replicas": [_plain(i) for i in images],
                "ldap_replica": _plain(ldap) if ldap else None,
            }
        )
        return
    emit_fields(detail)
    echo()
    emit_table(events, EVENT_COLUMNS, f"Events of {name}")
    if images:
        emit_table(images, IMAGE_COLUMNS, f"Image replicas on {name}")
    if ldap:
        emit_table([ldap], list(ldap), f"LDAP replica on {name}")


def _summary(session: Any, row: Any) -> dict[str, Any]:
    from clustermgr.directors.states import region_of

    provider, region = region_of(session, row)
    images = _image_replicas(session, row.id)
    ldap = _ldap_replica(session, row.id)
    return {
        "name": row.name,
        "provider": provider,
        "region": region,
        "state": row.state,
        "address": row.private_address,
        "instance_id": row.instance_id,
        "healthy_at": row.healthy_at,
        "image_state": ", ".join(f"{i['image']} {i['version']} {i['state']}" for i in images),
        "ldap_state": ldap["state"] if ldap else "",
    }


def _image_replicas(session: Any, director_id: int) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from clustermgr.db.models import Image, ImageReplica

    query = (
        select(Image.name, Image.version, ImageReplica)
        .join(Image, Image.id == ImageReplica.image_id)
        .where(ImageReplica.director_id == director_id)
        .order_by(Image.name, Image.created_at)
    )
    return [
        {
            "image": name,
            "version": version,
            "state": replica.state,
            "bytes_sent": replica.bytes_sent,
            "verified_at": replica.verified_at,
            "error": replica.error,
        }
        for name, version, replica in session.execute(query)
    ]


def _ldap_replica(session: Any, director_id: int) -> dict[str, Any] | None:
    from sqlalchemy import select

    from clustermgr.db.models import LdapReplica

    replica = session.scalars(
        select(LdapReplica).where(LdapReplica.director_id == director_id)
    ).one_or_none()
    if replica is None:
        return None
    return {
        "mode": replica.mode,
        "state": replica.state,
        "entries": replica.entries,
        "lag_seconds": replica.lag_seconds,
        "last_success_at": replica.last_success_at,
        "error": replica.error,
    }


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}

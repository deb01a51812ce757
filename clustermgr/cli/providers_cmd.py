"""`clustermgr providers list|check|instances`, `templates list`, `catalog`."""

from __future__ import annotations

from typing import Any

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, emit


@click.group()
def providers() -> None:
    """Cloud providers from the configuration."""


@providers.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_providers(app: AppContext, as_json: bool) -> None:
    """Configured providers (credentials are shown by source, never by value)."""
    settings = app.settings()
    rows = [
        {
            "name": p.name,
            "type": p.type,
            "region": p.region,
            "credentials": p.credentials.source,
            "endpoint_url": p.endpoint_url,
            "templates": [t.name for t in settings.templates if t.provider == p.name],
        }
        for p in settings.providers
    ]
    emit(rows, ("name", "type", "region", "credentials", "templates"), as_json, "Providers")


@providers.command()
@click.argument("name")
@click.pass_obj
def check(app: AppContext, name: str) -> None:
    """Check credentials and reachability, and that the provider offers every instance type
    its templates name: one line per check; exit 1 if any fails."""
    from clustermgr.providers.registry import make_provider

    settings = app.settings()
    provider = make_provider(settings.provider(name), settings.cluster.name)
    results = provider.check()
    if all(result.ok for result in results):
        results.extend(_offered_checks(settings, name, provider))
    for result in results:
        echo(f"{'OK  ' if result.ok else 'FAIL'} {name}: {result.name}: {result.detail}")
    if not all(result.ok for result in results):
        raise SystemExit(1)


def _offered_checks(settings: Any, name: str, provider: Any) -> list[Any]:
    """One result per template of the provider: every instance type it names is offered."""
    from clustermgr.core.errors import ClusterMgrError
    from clustermgr.providers.base import CheckResult
    from clustermgr.providers.catalog import unoffered_types

    mine = [t for t in settings.templates if t.provider == name]
    if not mine:
        return []
    try:
        offered = {itype.name for itype in provider.catalog()}
    except ClusterMgrError as exc:
        return [CheckResult("instance types", False, f"cannot list them: {exc}")]
    problems = unoffered_types(settings, {name: offered})
    results = []
    for template in mine:
        said = [p for p in problems if p.startswith(f"template {template.name}: ")]
        detail = "; ".join(p.split(": ", 1)[1] for p in said)
        types = ", ".join(template.instance_types)
        results.append(
            CheckResult(
                f"template {template.name}",
                not said,
                detail or f"instance types offered ({types})",
            )
        )
    return results


@providers.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def instances(app: AppContext, name: str, as_json: bool) -> None:
    """What the cloud says is ours (tagged with this cluster's name)."""
    from clustermgr.providers.registry import make_provider

    settings = app.settings()
    provider = make_provider(settings.provider(name), settings.cluster.name)
    rows: list[dict[str, Any]] = [
        {
            "instance_id": inst.instance_id,
            "node": inst.node_name,
            "state": inst.state.value,
            "instance_type": inst.instance_type,
            "zone": inst.zone,
            "lifecycle": inst.lifecycle,
            "private_address": inst.private_address,
            "launch_time": inst.launch_time,
            "template": inst.template,
            "request_id": inst.request_id,
        }
        for inst in sorted(provider.list_instances().values(), key=lambda i: i.instance_id)
    ]
    columns = ("instance_id", "node", "state", "instance_type", "private_address", "template")
    emit(rows, columns, as_json, f"Instances of {name}")


@click.group()
def templates() -> None:
    """Node templates (categories of cloud nodes) from the configuration."""


@templates.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_templates(app: AppContext, as_json: bool) -> None:
    """Configured templates, with their launch/boot failures in a row and protection."""
    from datetime import UTC, datetime

    from clustermgr.core.errors import ClusterMgrError
    from clustermgr.scaling.protection import TemplateHealth, template_health

    settings = app.settings()
    health: dict[str, TemplateHealth] = {}
    try:  # the configuration alone lists the templates; the database adds their health
        database = app.existing_database()
        if database is not None:
            with database.session() as session:
                now = datetime.now(UTC)
                health = {h.template: h for h in template_health(session, settings, now)}
    except ClusterMgrError as exc:
        echo(f"clustermgr: no failure counts ({exc})", err=True)
    rows = [
        {
            "name": t.name,
            "provider": t.provider,
            "region": settings.provider(t.provider).region,
            "partition": t.partition,
            "nodes": t.nodes,
            "max_nodes": t.node_limit,
            "instance_types": list(t.instance_types),
            "cpus": t.cpus,
            "memory_mb": t.memory_mb,
            "gpu_model": t.gpu_model,
            "gpus": t.gpus,
            "market": t.market,
            "demand_mode": t.demand_mode,
            "failures_in_a_row": health[t.name].failures if t.name in health else None,
            "protected": health[t.name].protected is not None if t.name in health else None,
            "protected_reason": health[t.name].protected if t.name in health else None,
        }
        for t in settings.templates
    ]
    columns = (
        "name",
        "provider",
        "partition",
        "nodes",
        "instance_types",
        "gpus",
        "market",
        "failures_in_a_row",
        "protected",
    )
    emit(rows, columns, as_json, "Templates")


@templates.command("reset")
@click.argument("name")
@click.pass_obj
def reset_template(app: AppContext, name: str) -> None:
    """Clear a template's protected mode: it launches again at the next cycle."""
    from clustermgr.cli.privilege import require_root

    require_root("templates reset")
    from datetime import UTC, datetime

    from clustermgr.db.models import ClusterEvent
    from clustermgr.scaling.protection import RESET_EVENT

    settings = app.settings()
    settings.template(name)  # one clear line (exit 2) for an unknown name
    with app.database().session() as session:
        session.add(
            ClusterEvent(
                at=datetime.now(UTC),
                kind=RESET_EVENT,
                source="clustermgr templates reset",
                message=name,
            )
        )
    echo(f"{name}: failure count cleared; it may launch again at the next cycle")


@click.command()
@click.option("--provider", "provider_name", help="Only this provider.")
@click.option("--gpus", type=click.IntRange(0), help="Only types with at least this many GPUs.")
@click.option("--refresh", is_flag=True, help="Ask the cloud again instead of the cache.")
@click.option(
    "--reservations",
    "show_reservations",
    is_flag=True,
    help="The capacity reservations templates launch into (total, in use, free, window).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def catalog(
    app: AppContext,
    provider_name: str | None,
    gpus: int | None,
    refresh: bool,
    show_reservations: bool,
    as_json: bool,
) -> None:
    """Instance types (vCPUs, memory, GPUs, hourly prices), cached in the database; with
    --reservations, the reservations templates launch into, cached the same way."""
    from clustermgr.providers.catalog import cached_catalog, store_catalog
    from clustermgr.providers.registry import make_provider
    from clustermgr.providers.reservations import refresh_reservations

    settings = app.settings()
    database = app.database()
    wanted = [settings.provider(provider_name)] if provider_name else list(settings.providers)
    with database.session() as session:
        cached = {row.provider for row in cached_catalog(session, provider_name)}
    fetch = [conf for conf in wanted if refresh or conf.name not in cached]
    if fetch:  # storing what the clouds answer changes the database
        from clustermgr.cli.privilege import require_root

        require_root("catalog --refresh" if refresh else "catalog (nothing cached yet)")
    for conf in fetch:
        made = make_provider(conf, settings.cluster.name)
        types = made.catalog()
        with database.session() as session:
            store_catalog(session, settings, conf.name, types)
            refresh_reservations(session, settings, conf.name, made)
    if show_reservations:
        emit_reservations(app, provider_name, as_json)
        return
    with database.session() as session:
        rows = [
            {
                "provider": row.provider,
                "name": row.name,
                "vcpus": row.vcpus,
                "memory_mb": row.memory_mb,
                "gpu_model": row.gpu_model,
                "gpus": row.gpu_count,
                "gpu_memory_mb": row.gpu_memory_mb,
                "price_on_demand": row.price_on_demand,
                "price_spot": row.price_spot,
                "updated_at": row.updated_at,
            }
            for row in cached_catalog(session, provider_name, gpus)
        ]
    columns = ("provider", "name", "vcpus", "memory_mb", "gpu_model", "gpus", "price_on_demand")
    emit(rows, columns, as_json, "Instance types")


def emit_reservations(app: AppContext, provider_name: str | None, as_json: bool) -> None:
    """The cached reservations, one row each (clustermgr.providers.reservations)."""
    from clustermgr.providers.reservations import stored_reservations, window

    with app.database().session() as session:
        rows = [
            {
                "provider": row.provider,
                "id": row.reservation_id,
                "type": row.kind,
                "templates": row.templates.split(",") if row.templates else [],
                "instance_type": row.instance_type,
                "zone": row.zone,
                "state": row.state,
                "total": row.total,
                "in_use": max(0, row.total - row.available),
                "free": row.available,
                "starts_at": row.starts_at,
                "ends_at": row.ends_at,
                "window": window(row.starts_at, row.ends_at),
                "updated_at": row.updated_at,
            }
            for row in stored_reservations(session, provider_name)
        ]
    columns = ("provider", "id", "type", "instance_type", "total", "in_use", "free", "window")
    emit(rows, columns, as_json, "Reservations")

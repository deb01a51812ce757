"""`clustermgr nodes sync|list|show|history` and `clustermgr events`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, emit, emit_fields, emit_json, emit_table
from clustermgr.core.errors import NotFoundError, UsageError
from clustermgr.nodes.states import NodeState, power_of

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement

NODE_KEYS = (
    "name",
    "kind",
    "state",
    "template",
    "provider",
    "region",
    "partitions",
    "instance_id",
    "instance_type",
    "market",
    "private_address",
    "cpus",
    "memory_mb",
    "gpus",
    "gpu_model",
    "slurm_state",
    "image_revision",
    "kernel",
    "state_reason",
    "state_since",
    "launched_at",
    "updated_at",
)
TIME_KEYS = ("state_since", "launched_at", "updated_at")
TABLE_COLUMNS = (
    "name",
    "kind",
    "state",
    "template",
    "provider",
    "instance_id",
    "gpus",
    "state_reason",
)
EVENT_KEYS = ("at", "node", "old_state", "new_state", "kind", "reason", "actor")


@click.group()
def nodes() -> None:
    """On-prem and cloud nodes known to clustermgr."""


@nodes.command()
@click.option("--no-slurm", is_flag=True, help="Only register the templates' cloud slots.")
@click.pass_obj
def sync(app: AppContext, no_slurm: bool) -> None:
    """Register on-prem nodes from Slurm and every cloud slot from the templates."""
    from clustermgr.cli.privilege import require_root

    require_root("nodes sync")
    from clustermgr.nodes.inventory import sync_nodes
    from clustermgr.workload.slurm import SlurmCli

    settings = app.settings()
    database = app.database()
    slurm_nodes = None
    if not no_slurm:
        slurm = SlurmCli(settings.slurm.bin_dir, settings.slurm.command_timeout_s)
        slurm_nodes = slurm.nodes()  # read before the transaction: no half-written sync
    with database.session() as session:
        report = sync_nodes(session, settings, slurm_nodes)
    echo(
        f"nodes sync: {len(report.added)} added, {len(report.restored)} restored, "
        f"{len(report.updated)} updated, {len(report.retired)} retired"
    )
    if report.still_active:
        echo(
            f"kept (still hold an instance; retired once powered down): "
            f"{_hostlist(report.still_active)}"
        )
    if report.unmanaged_cloud:
        echo(
            f"warning: Slurm CLOUD nodes in no template (not managed): "
            f"{_hostlist(report.unmanaged_cloud)}",
            err=True,
        )
    if not no_slurm:
        from clustermgr.cli.config_cmd import warn_slurm_mismatches

        warn_slurm_mismatches(app, "nodes sync")


def _hostlist(names: list[str]) -> str:
    from clustermgr.core.hostlists import compress

    return compress(names)


@nodes.command("list")
@click.option("--state", type=click.Choice([s.value for s in NodeState], case_sensitive=False))
@click.option("--template", help="Only nodes of this template.")
@click.option("--provider", help="Only nodes of this provider.")
@click.option("--kind", type=click.Choice(["onprem", "cloud"]))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_nodes(
    app: AppContext,
    state: str | None,
    template: str | None,
    provider: str | None,
    kind: str | None,
    as_json: bool,
) -> None:
    """List nodes, optionally filtered. A node whose power clustermgr switches through
    its BMC (an ipmi/redfish template's) is of kind "onprem", like the on-prem nodes it
    only watches; the rest of the templates' slots are "cloud"."""
    from sqlalchemy import or_, select

    from clustermgr.db.models import Node

    with app.database(validate_config=False).session() as session:
        powered = _onprem_providers(session)
    columns = [getattr(Node, key) for key in NODE_KEYS]
    query = select(*columns).order_by(Node.name)
    if state:
        query = query.where(Node.state == state.upper())
    if template:
        query = query.where(Node.template == template)
    if provider:
        query = query.where(Node.provider == provider)
    if kind == "onprem":
        query = query.where(or_(Node.kind == "onprem", Node.provider.in_(powered)))
    elif kind == "cloud":
        query = query.where(Node.kind == "cloud", Node.provider.not_in(powered))
    with app.database(validate_config=False).session() as session:
        # plain rows through the connection, fetched at once: the ORM's result layer and
        # row-by-row fetching cost ~40 ms per 10,000 nodes
        result = session.connection().execute(query).all()
        rows = [dict(zip(NODE_KEYS, row, strict=True)) for row in result]
        if not rows:  # an unknown name is bad input, not an empty listing
            _refuse_unknown(session, Node.template, "template", template)
            _refuse_unknown(session, Node.provider, "provider", provider)
    shown: tuple[str, ...] = TABLE_COLUMNS
    if powered:  # on-prem templates configured: each node's power, as the engine has it
        for row in rows:
            on_bmc = row["provider"] in powered
            row["power"] = power_of(row["state"]) if on_bmc else "-"
            if on_bmc:
                row["kind"] = "onprem"
        shown = (*TABLE_COLUMNS[:3], "power", *TABLE_COLUMNS[3:])
    if any(row["image_revision"] or row["kernel"] for row in rows):  # what the nodes report
        shown = (*shown[:-1], "image_revision", "kernel", shown[-1])
    if as_json:
        for row in rows:  # here rather than json's default hook: a third of the encoding time
            for key in TIME_KEYS:
                if row[key] is not None:
                    row[key] = row[key].isoformat()
    emit(rows, shown, as_json, "Nodes")


def _refuse_unknown(session: Any, column: Any, what: str, name: str | None) -> None:
    from sqlalchemy import select

    if name is None:
        return
    known = sorted(n for n in session.scalars(select(column).distinct()) if n)
    if name not in known:
        listed = ", ".join(known) if known else "none registered: run `clustermgr nodes sync`"
        raise UsageError(f"--{what} {name!r}: no node has this {what} (known: {listed})")


def _onprem_providers(session: Any) -> frozenset[str]:
    """Providers that power on-prem nodes, from the providers table (`nodes sync` mirrors
    the config there), so a listing needs neither a valid config nor pydantic."""
    from sqlalchemy import select

    from clustermgr.db.models import Provider

    # the built-in BMC types: loading every kind (their options models) would import pydantic
    query = select(Provider.name).where(Provider.type.in_(("ipmi", "redfish")))
    return frozenset(session.scalars(query))


def _load_node(session: Any, name: str) -> Any:
    from sqlalchemy import select

    from clustermgr.db.models import Node

    node = session.scalars(select(Node).where(Node.name == name)).first()
    if node is None:
        raise NotFoundError(f"no node named {name!r} (see `clustermgr nodes list`)")
    return node


@nodes.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show(app: AppContext, name: str, as_json: bool) -> None:
    """Everything clustermgr knows about one node. Its Slurm state is as the last cycle read
    it (`slurm_state_as_of`); `scontrol show node` says what Slurm says now."""
    from sqlalchemy import func, select

    from clustermgr.db.models import DaemonStatus

    with app.database().session() as session:
        node = _load_node(session, name)
        row = {key: getattr(node, key) for key in NODE_KEYS}
        row["version"] = node.version
        if node.provider in _onprem_providers(session):
            row["kind"] = "onprem"  # as `nodes list` shows it
        as_of = session.scalar(select(func.max(DaemonStatus.last_cycle_at)))
    row["slurm_state_as_of"] = as_of if row["slurm_state"] else None
    if as_json:
        emit_json(row)
        return
    if row["slurm_state"]:
        when = f"as the cycle of {as_of:%Y-%m-%d %H:%M:%S} read it" if as_of else "as last read"
        row["slurm_state"] = f"{row['slurm_state']} ({when})"
    del row["slurm_state_as_of"]
    emit_fields(row)


@nodes.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def history(app: AppContext, name: str, as_json: bool) -> None:
    """Every state transition of one node, oldest first."""
    with app.database().session() as session:
        node = _load_node(session, name)
        rows = [_event_row(node.name, event) for event in node.events]
    emit(rows, EVENT_KEYS, as_json, f"History of {name}")


def _event_row(node: str, event: Any) -> dict[str, Any]:
    return {
        "at": event.at,
        "node": node,
        "old_state": event.old_state,
        "new_state": event.new_state,
        "kind": event.reason_kind,
        "reason": event.reason,
        "actor": event.actor,
    }


_DURATION = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: datetime) -> datetime:
    """'90s', '15m', '2h', '7d', '1w', or an ISO-8601 time."""
    found = _DURATION.match(text.strip())
    if found:
        return now - timedelta(seconds=float(found["n"]) * _UNITS[found["unit"]])
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"--since {text!r}: expected a duration like 15m, 2h, 7d or an ISO time"
        ) from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


CLUSTER_EVENT_KEYS = ("at", "kind", "source", "message")


@click.command()
@click.option(
    "--since", default="1d", show_default=True, help="Duration (15m, 2h, 7d) or ISO time."
)
@click.option("--node", help="Only events of this node.")
@click.option(
    "--cluster",
    is_flag=True,
    help="Cluster events instead: cycles, refusals, hook requests, policy errors, ...",
)
@click.option("--kind", help="With --cluster: only events of this kind (cycle, refusal, ...).")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="With --cluster: cycles that launched and stopped nothing too (hidden otherwise).",
)
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def events(
    app: AppContext,
    since: str,
    node: str | None,
    cluster: bool,
    kind: str | None,
    show_all: bool,
    limit: int,
    as_json: bool,
) -> None:
    """Recent node state transitions across the cluster, oldest first (--cluster: what
    happened to the cluster rather than to one node)."""
    from sqlalchemy import select

    from clustermgr.db.models import Node, NodeEvent

    if kind and not cluster:
        raise UsageError("--kind goes with --cluster (node transitions: use --node)")
    if show_all and not cluster:
        raise UsageError("--all goes with --cluster (node transitions are all shown)")
    if node and cluster:
        raise UsageError("--node and --cluster exclude each other")
    start = parse_since(since, datetime.now(UTC))
    if cluster:
        _cluster_events(app, start, kind, limit, as_json, show_all)
        return
    query = (
        select(NodeEvent, Node.name)
        .join(Node)
        .where(NodeEvent.at >= start)
        .order_by(NodeEvent.at.desc(), NodeEvent.id.desc())
        .limit(limit)
    )
    if node:
        query = query.where(Node.name == node)
    with app.database().session() as session:
        rows = [_event_row(name, event) for event, name in session.execute(query)]
    rows.reverse()
    if as_json:
        emit_json(rows)
    else:
        emit_table(rows, EVENT_KEYS, "Events")


def idle_cycle() -> ColumnElement[bool]:
    """A cycle event that launched, stopped, failed, registered and directed nothing
    (scaling/engine.py's summary says so in its first parts)."""
    from sqlalchemy import and_, not_, or_

    from clustermgr.db.models import ClusterEvent
    from clustermgr.scaling.engine import ACTED_PARTS, DIRECTORS_PART, IDLE_SUMMARY

    message = ClusterEvent.message
    return and_(
        ClusterEvent.kind == "cycle",
        or_(
            message == IDLE_SUMMARY,
            and_(
                message.startswith(f"{IDLE_SUMMARY}, ", autoescape=True),
                *(
                    not_(message.startswith(f"{IDLE_SUMMARY}, {part}", autoescape=True))
                    for part in ACTED_PARTS
                ),
                not_(message.contains(f", {DIRECTORS_PART}", autoescape=True)),
            ),
        ),
    )


def _cluster_events(
    app: AppContext,
    start: datetime,
    kind: str | None,
    limit: int,
    as_json: bool,
    show_all: bool = False,
) -> None:
    from sqlalchemy import func, not_, select

    from clustermgr.db.models import ClusterEvent

    query = (
        select(ClusterEvent)
        .where(ClusterEvent.at >= start)
        .order_by(ClusterEvent.at.desc(), ClusterEvent.id.desc())
        .limit(limit)
    )
    if kind:
        query = query.where(ClusterEvent.kind == kind)
    if not show_all:
        query = query.where(not_(idle_cycle()))
    with app.database().session() as session:
        found = list(session.scalars(query))
        hidden = 0
        if not show_all and kind in (None, "cycle"):
            window = [ClusterEvent.at >= found[-1].at] if len(found) == limit else []
            hidden = (
                session.scalar(
                    select(func.count(ClusterEvent.id)).where(
                        ClusterEvent.at >= start, idle_cycle(), *window
                    )
                )
                or 0
            )
        rows = [{key: getattr(event, key) for key in CLUSTER_EVENT_KEYS} for event in found]
        if kind and not rows:  # none in the window: a kind never recorded is a typo
            known = sorted(session.scalars(select(ClusterEvent.kind).distinct()))
            if kind not in known:
                raise UsageError(
                    f"--kind {kind!r}: no cluster event of this kind "
                    f"(kinds recorded: {', '.join(known) if known else 'none yet'})"
                )
    rows.reverse()
    emit(rows, CLUSTER_EVENT_KEYS, as_json, "Cluster events")
    if hidden:  # on stderr under --json, which stays a list of events
        echo(
            f"{hidden} cycle{'s' if hidden > 1 else ''} that launched and stopped nothing "
            "hidden (--all shows them)",
            err=as_json,
        )

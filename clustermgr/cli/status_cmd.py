"""`clustermgr status`: daemon health, demand, nodes by state per template, cost."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, emit_json
from clustermgr.core.pricing import BillingRule

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from clustermgr.config import Settings
    from clustermgr.runtime.leader import LeaseState


def billing_of(settings: Settings, provider: str) -> BillingRule:
    """A run's billing rule: its provider's, or per-second when the provider left the config."""
    known = {p.name: p for p in settings.providers}
    return known[provider].billing if provider in known else BillingRule(1, 0)


def collect_status(app: AppContext) -> dict[str, Any]:
    from sqlalchemy import func, select

    from clustermgr.db.models import DaemonStatus, ForeignInstance, InstanceRun, Node
    from clustermgr.runtime.leader import db_now, describe_lease, read_lease
    from clustermgr.scaling.protection import template_health

    settings = app.settings()
    stale_s = settings.daemon.status_stale_s
    now = datetime.now(UTC)
    database = app.database()
    with database.session() as session:
        lease = read_lease(session, db_now(database))
        holder = lease.holder if lease and lease.live else None
        leader_id = holder.removeprefix("cm-scale@") if holder else None
        daemons: list[dict[str, Any]] = [
            {
                "id": row.id,
                "host": row.host,
                "pid": row.pid,
                "role": role_of(row.id, row.role, leader_id, heartbeat_age, stale_s),
                "heartbeat_age_s": round(heartbeat_age, 1),
                "alive": row.role != "stopped" and heartbeat_age <= stale_s,
                "last_cycle_at": row.last_cycle_at,
                "last_cycle_ok": row.last_cycle_ok,
                "last_cycle": row.last_cycle_summary,
                "last_cycle_duration_s": row.last_cycle_duration_s,
                "pending_jobs": row.pending_jobs,
                "pending_gpus": row.pending_gpus,
                "hourly_cost": row.hourly_cost,
                "cycles_failed_in_row": row.cycles_failed_in_row,
                "cycles_failed": row.cycles_failed,
                "config": {
                    "path": row.config_path,
                    "digest": row.config_digest,
                    "loaded_at": row.config_loaded_at,
                }
                if row.config_path
                else None,
            }
            for row in session.scalars(
                select(DaemonStatus)
                .where(DaemonStatus.heartbeat_at >= now - timedelta(seconds=SHOWN_FOR_S))
                .order_by(DaemonStatus.heartbeat_at.desc())
            )
            for heartbeat_age in [(now - row.heartbeat_at).total_seconds()]
        ]
        by_template: dict[str, dict[str, int]] = {}
        onprem = onprem_templates(settings)
        for template, state, count in session.execute(
            select(Node.template, Node.state, func.count())
            .where(Node.kind == "cloud")
            .group_by(Node.template, Node.state)
        ):
            by_template.setdefault(template or "-", {})[state] = count
        running: dict[str, dict[str, int]] = {}  # template -> "revision, kernel" -> nodes
        for template, revision, kernel, count in session.execute(
            select(Node.template, Node.image_revision, Node.kernel, func.count())
            .where(Node.kind == "cloud", Node.kernel.is_not(None))
            .group_by(Node.template, Node.image_revision, Node.kernel)
        ):
            what = f"revision {revision or '-'}, kernel {kernel}"
            running.setdefault(template or "-", {})[what] = count
        runs = session.execute(
            select(func.count(InstanceRun.id), func.coalesce(func.sum(InstanceRun.cost), 0.0))
        ).one()
        open_runs = list(session.scalars(select(InstanceRun).where(InstanceRun.ended_at.is_(None))))
        health = template_health(session, settings, now)
        foreign = [
            {
                "provider": row.provider,
                "instance_id": row.instance_id,
                "template_tag": row.template_tag,
                "request_tag": row.request_tag,
                "role_tag": row.role_tag,
                "state": row.state,
                "launched_at": row.launched_at,
                "since": row.first_seen_at,
                "last_seen": row.last_seen_at,
            }
            for row in session.scalars(
                select(ForeignInstance).order_by(
                    ForeignInstance.provider, ForeignInstance.instance_id
                )
            )
        ]
        reservations = reservations_in_use(session, settings)
        refused = {
            str(d["id"]): refused_reload(session, str(d["id"])) for d in daemons if d["alive"]
        }
        protected = {h.template: h.protected for h in health if h.protected is not None}
        backing_off = {h.template: h.backoff for h in health if h.backoff is not None}
    running_cost = sum(
        billing_of(settings, r.provider).cost(r.hourly_price, (now - r.started_at).total_seconds())
        for r in open_runs
    )
    # the running daemon: the lease's live holder whose heartbeat is fresh; a `--once` run's
    # record (role "once") says what its cycle saw, but no daemon runs for it
    leader = next((d for d in daemons if d["alive"] and d["role"] == "leader"), None)
    # demand as the last cycle saw it (a live leader's, else the newest record: a `--once`
    # run, a stopped daemon), and what the open instances cost now, whoever runs
    seen = leader or next((d for d in daemons if d["last_cycle_at"] is not None), None)
    for head in daemons:
        head["reload_refused"] = refused.get(head["id"])
        if head["config"] is not None:
            head["config"]["digest_now"] = digest_here(head)
    heads = [d for d in daemons if d["role"] not in ("once", "stopped")]
    problem = health_problem(leader, heads, lease, stale_s)
    return {
        "daemon": leader,
        "daemons": heads,
        "healthy": problem is None,
        "problem": problem,
        "lease": {
            "holder": lease.holder if lease else None,
            "generation": lease.generation if lease else None,
            "live": bool(lease and lease.live),
            "expires_in_s": round(lease.expires_in_s, 1) if lease else None,
            "said": describe_lease(lease),
        },
        "pending_jobs": seen["pending_jobs"] if seen else None,
        "pending_gpus": seen["pending_gpus"] if seen else None,
        "pending_as_of": seen["last_cycle_at"] if seen else None,
        "hourly_cost": round(sum(r.hourly_price for r in open_runs), 4),
        "instances_running": len(open_runs),
        "nodes": by_template,
        "running_images": running,
        "instances_launched": int(runs[0]),
        "cost_total": round(float(runs[1] or 0.0) + running_cost, 4),
        "protected_templates": protected,
        "backing_off_templates": backing_off,
        "foreign_instances": foreign,
        "reservations": reservations,
        **({"onprem_power": power_saved(onprem, by_template)} if onprem else {}),
    }


SHOWN_FOR_S = 86400.0  # a head silent for longer is no longer listed (its row stays)


def health_problem(
    leader: dict[str, Any] | None,
    heads: list[dict[str, Any]],
    lease: LeaseState | None,
    stale_s: float,
) -> str | None:
    """What `status --check` fails on, in one line (None: healthy): no head running, no
    live leader, the leader's heartbeat stale, or its last cycle failed."""
    from clustermgr.runtime.leader import describe_lease

    if leader is not None:
        if leader["last_cycle_ok"] is False or leader["cycles_failed_in_row"]:
            return (
                f"the last cycle failed ({leader['cycles_failed_in_row']} in a row, "
                f"{leader['cycles_failed']} since start): {leader['last_cycle']}"
            )
        return None
    holder = lease.holder.removeprefix("cm-scale@") if lease and lease.holder else None
    stale = [h for h in heads if h["role"] == "stale"]
    holding = next((h for h in stale if h["id"] == holder), None)
    if lease is not None and lease.live and holding is not None:
        return (
            f"the leader's heartbeat is stale: {holding['host']} pid {holding['pid']}, "
            f"{holding['heartbeat_age_s']:.0f} s ago (more than {stale_s:g} s)"
        )
    live = [h for h in heads if h["alive"]]
    if live:
        return (
            f"no live leader (lease: {describe_lease(lease)}); {len(live)} live standby, "
            "it takes over when the lease runs out"
        )
    if stale:
        newest = min(stale, key=lambda h: h["heartbeat_age_s"])
        return (
            f"cm-scale is not running: the last heartbeat is {newest['heartbeat_age_s']:.0f} s "
            f"old ({newest['host']} pid {newest['pid']}, stale after {stale_s:g} s)"
        )
    return "cm-scale is not running: no head has a heartbeat"


def digest_here(head: dict[str, Any]) -> str | None:
    """The digest of the head's configuration file as it is now, when that head runs on
    this host and the file can be read here (None otherwise)."""
    import socket
    from pathlib import Path

    from clustermgr.runtime.pair import config_digest

    if head["host"] != socket.gethostname():
        return None
    digest = config_digest(Path(head["config"]["path"]))
    return None if digest.startswith("unreadable-") else digest


def refused_reload(session: Session, daemon_id: str) -> dict[str, Any] | None:
    """The head's newest reload event when it was refused (its running config was kept):
    a file the daemon would not load waits to be fixed."""
    from sqlalchemy import select

    from clustermgr.db.models import ClusterEvent
    from clustermgr.runtime.pair import RELOAD, RELOAD_REFUSED

    newest = session.execute(
        select(ClusterEvent.at, ClusterEvent.message)
        .where(ClusterEvent.kind == RELOAD, ClusterEvent.source == f"cm-scale@{daemon_id}"[:64])
        .order_by(ClusterEvent.at.desc(), ClusterEvent.id.desc())
        .limit(1)
    ).first()
    if newest is None or not newest.message.startswith(RELOAD_REFUSED):
        return None
    return {"at": newest.at, "message": newest.message}


def role_of(
    daemon_id: str, recorded: str, leader_id: str | None, heartbeat_age_s: float, stale_s: float
) -> str:
    """What a head is now: the lease says who leads (one at most), the heartbeat whether
    a head lives; its own record only says once or stopped."""
    if recorded in ("once", "stopped"):
        return recorded
    if heartbeat_age_s > stale_s:
        return "stale"
    return "leader" if daemon_id == leader_id else "standby"


def reservations_in_use(session: Session, settings: Settings) -> list[dict[str, Any]]:
    """The cached reservations the configured templates launch into (as of the last catalog
    refresh), one summary each."""
    from clustermgr.providers.reservations import stored_reservations, targets_of

    used = {(p.name, ref) for p in settings.providers for ref in targets_of(settings, p.name)}
    return [
        {
            "provider": row.provider,
            "id": row.reservation_id,
            "type": row.kind,
            "instance_type": row.instance_type,
            "templates": row.templates.split(",") if row.templates else [],
            "total": row.total,
            "in_use": max(0, row.total - row.available),
            "free": row.available,
            "state": row.state,
            "starts_at": row.starts_at,
            "ends_at": row.ends_at,
            "as_of": row.updated_at,
        }
        for row in stored_reservations(session)
        if (row.provider, row.reservation_id) in used
    ]


def reservation_line(found: dict[str, Any]) -> str:
    from clustermgr.providers.reservations import window

    span = window(found["starts_at"], found["ends_at"])
    return (
        f"{found['type']} {found['id']} ({found['instance_type']}, "
        f"{', '.join(found['templates']) or '-'}): {found['in_use']} of {found['total']} in use, "
        f"{found['free']} free, {found['state']}"
        + (f", window {span}" if span else "")
        + f" (as of {found['as_of']:%H:%M})"
    )


def onprem_templates(settings: Settings) -> dict[str, float]:
    """On-prem templates (ipmi, redfish providers) and their idle power per node, kW."""
    from clustermgr.config import is_onprem

    return {
        t.name: t.idle_kw for t in settings.templates if is_onprem(settings.provider(t.provider))
    }


def power_saved(
    idle_kw: dict[str, float], by_template: dict[str, dict[str, int]]
) -> dict[str, Any]:
    """Estimated kW saved now: powered-off on-prem nodes x their template's idle_kw."""
    templates = {
        name: {
            "powered_off": by_template.get(name, {}).get("POWERED_DOWN", 0),
            "idle_kw": kw,
            "saved_kw": round(by_template.get(name, {}).get("POWERED_DOWN", 0) * kw, 3),
        }
        for name, kw in sorted(idle_kw.items())
    }
    return {
        "saved_kw": round(sum(t["saved_kw"] for t in templates.values()), 3),
        "templates": templates,
    }


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--check",
    is_flag=True,
    help="One line for monitoring: exit 0 healthy, 1 when no head leads, the leader's "
    "heartbeat is stale or its last cycle failed.",
)
@click.pass_obj
def status(app: AppContext, as_json: bool, check: bool) -> None:
    """Daemon health (leader/standby, last cycle, heartbeat, config), demand, nodes, cost.
    Exits 1 when unhealthy (as --check says why), so monitoring may read either."""
    data = readable_status(app)
    if check:
        line = f"cm-scale: {data['problem'] or ok_line(data['daemon'])}"
        if as_json:
            emit_json({"healthy": data["healthy"], "problem": data["problem"]})
        else:
            echo(line)
    elif as_json:
        emit_json(data)
    else:
        show(data)
    if not data["healthy"]:
        raise SystemExit(UNHEALTHY)


UNHEALTHY = 1  # the exit code monitoring reads: no head leads, or the leader's cycles fail


def readable_status(app: AppContext) -> dict[str, Any]:
    """The status, or for a user who may not read cm-scale's state one line saying what
    they may do instead (never advice only root can follow, such as `db upgrade`)."""
    from clustermgr.cli.privilege import reads_state
    from clustermgr.core.errors import ClusterMgrError, UsageError

    try:
        return collect_status(app)
    except ClusterMgrError as exc:
        allowed, group = reads_state(app)
        if allowed or app.db_url or os.environ.get("CLUSTERMGR_DB"):  # a database of one's own
            raise
        admins = f" and the group {group}" if group else ""
        raise UsageError(
            f"`clustermgr status` reads cm-scale's state, which only root{admins} may read; "
            "`cmsub --status JOBID` shows your own transfers, squeue and sinfo the queue"
        ) from exc


def ok_line(leader: dict[str, Any]) -> str:
    last = (
        f"last cycle {leader['last_cycle_at']:%H:%M:%S} ok"
        if leader["last_cycle_at"]
        else "no cycle yet"
    )
    return (
        f"ok: leader on {leader['host']} pid {leader['pid']}, heartbeat "
        f"{leader['heartbeat_age_s']:.0f} s ago, {last}"
    )


def show(data: dict[str, Any]) -> None:
    leader = data["daemon"]
    if leader is None:
        live = [d for d in data["daemons"] if d["alive"]]
        echo(
            f"cm-scale: NO LIVE LEADER (lease: {data['lease']['said']}; "
            + (
                f"{len(live)} live standby, it takes over when the lease runs out)"
                if live
                else "no head running)"
            )
        )
        for head in data["daemons"]:
            echo(head_line(head))
        if data["pending_as_of"] is not None:
            echo(
                f"pending at the last cycle ({data['pending_as_of']:%Y-%m-%d %H:%M:%S}, jobs "
                "a cloud template fits): "
                f"{data['pending_jobs']} jobs, {data['pending_gpus']} GPUs"
            )
    else:
        echo(
            f"cm-scale: {leader['role']} on {leader['host']} pid {leader['pid']}, heartbeat "
            f"{leader['heartbeat_age_s']:.0f} s ago; last cycle {leader['last_cycle_at']:%H:%M:%S} "
            f"({leader['last_cycle_duration_s'] or 0:.2f} s): {leader['last_cycle']}"
            if leader["last_cycle_at"]
            else f"cm-scale: {leader['role']} on {leader['host']} pid {leader['pid']}, no cycle yet"
        )
        if leader["cycles_failed"]:
            echo(
                f"failed cycles: {leader['cycles_failed_in_row']} in a row, "
                f"{leader['cycles_failed']} since start"
            )
        for line in config_lines(leader):
            echo(line)
        for head in data["daemons"]:
            if head["id"] != leader["id"]:
                echo(head_line(head))
        echo(
            f"pending (jobs a cloud template fits): {data['pending_jobs']} jobs, "
            f"{data['pending_gpus']} GPUs"
        )
    echo(f"running: {data['instances_running']} instances, ${data['hourly_cost']:.2f}/h")
    for template, states in sorted(data["nodes"].items()):
        counts = ", ".join(f"{state} {count}" for state, count in sorted(states.items()))
        echo(f"{template}: {counts}")
        for what, count in sorted(data["running_images"].get(template, {}).items()):
            echo(f"{template}: {count} on image {what}")
    for template, reason in sorted(data["protected_templates"].items()):
        echo(f"{template}: PROTECTED {reason}")
    for template, reason in sorted(data["backing_off_templates"].items()):
        echo(f"{template}: BACKING OFF {reason}")
    for found in data["foreign_instances"]:
        echo(
            f"FOREIGN {found['provider']} {found['instance_id']} (template tag "
            f"{found['template_tag'] or '-'}, request tag {found['request_tag'] or '-'}"
            + (f", role tag {found['role_tag']}" if found["role_tag"] else "")
            + f") since {found['since']:%Y-%m-%d %H:%M:%S}: not launched by cm-scale, left alone"
        )
    for found in data["reservations"]:
        echo(reservation_line(found))
    power = data.get("onprem_power")
    if power is not None:
        off = sum(t["powered_off"] for t in power["templates"].values())
        echo(f"on-prem power: {off} nodes off, ~{power['saved_kw']:.1f} kW saved")
    echo(f"instances launched: {data['instances_launched']}, cost so far ${data['cost_total']:.2f}")


def config_lines(head: dict[str, Any]) -> list[str]:
    """The configuration a head runs on, and a reload it refused since (the file as it is
    now waits to be fixed; the running one stays in effect)."""
    config = head["config"]
    lines = []
    if config is not None:
        loaded = config["loaded_at"]
        lines.append(
            f"config: {config['path']} sha256:{config['digest']}"
            + (f", loaded {loaded:%Y-%m-%d %H:%M:%S}" if loaded else "")
        )
    refused = head["reload_refused"]
    if refused is not None:
        lines.append(f"RELOAD REFUSED at {refused['at']:%Y-%m-%d %H:%M:%S}: {refused['message']}")
    elif config is not None and config["digest_now"] not in (None, config["digest"]):
        lines.append(
            f"config: the file has changed since it was loaded (now sha256:"
            f"{config['digest_now']}): reload cm-scale (SIGHUP) to apply it"
        )
    return lines


def head_line(head: dict[str, Any]) -> str:
    return (
        f"{head['role']}: {head['host']} pid {head['pid']}, heartbeat "
        f"{head['heartbeat_age_s']:.0f} s ago"
        + (" (dead or frozen)" if head["role"] == "stale" else "")
    )

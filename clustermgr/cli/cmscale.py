"""`cm-scale`: the scaling daemon. `--once` runs one full cycle and exits."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from clustermgr import __version__
from clustermgr.cli.output import echo, echo_click_error, echo_error, echo_traceback
from clustermgr.core.errors import ClusterMgrError

if TYPE_CHECKING:
    from clustermgr.runtime.statedir import StateOwners

log = logging.getLogger("cm-scale")
# with the SDK loggers each provider kind names (clustermgr.core.kinds)
QUIET_LOGGERS = (
    "apscheduler",
    "alembic",  # its plugin set-up logs at INFO whenever the schema head is looked up
)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="cm-scale")
@click.option("--config", "config_path", envvar="CLUSTERMGR_CONFIG", help="Config file.")
@click.option("--db", "db_url", help="Database URL (env CLUSTERMGR_DB).")
@click.option("--once", is_flag=True, help="Run one cycle (observe, decide, act, reconcile).")
@click.option("--dry-run", is_flag=True, help="Decide and print the plan; act on nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print the plan as JSON.")
@click.option("--skip-slurm-check", is_flag=True, help="Start even if slurm.conf mismatches.")
@click.option(
    "--serve-munge-key",
    is_flag=True,
    help="Serve only the munge key to booting nodes (for cycles run with --once).",
)
@click.option("--debug", is_flag=True, help="Debug logging and tracebacks.")
def cm_scale(
    config_path: str | None,
    db_url: str | None,
    once: bool,
    serve_munge_key: bool,
    dry_run: bool,
    as_json: bool,
    skip_slurm_check: bool,
    debug: bool,
) -> None:
    """Scale the cluster's cloud nodes with the configured policies."""
    if as_json and not dry_run:  # without --dry-run it would start the daemon, which acts
        raise click.UsageError("--json only goes with --dry-run (it prints the plan as JSON)")
    from clustermgr.cli.context import AppContext
    from clustermgr.core.kinds import sdk_loggers
    from clustermgr.core.logsafe import configure
    from clustermgr.scaling.engine import Engine

    configure(logging.DEBUG if debug else logging.INFO)
    if not debug:  # the SDKs log every HTTP request (and APScheduler every run) at INFO
        for chatty in (*sdk_loggers(), *QUIET_LOGGERS):
            logging.getLogger(chatty).setLevel(logging.WARNING)
    from clustermgr.db.database import DAEMON_POOL_SIZE

    app = AppContext(config_path=config_path, db_url=db_url, debug=debug)
    app.pool_size = DAEMON_POOL_SIZE
    settings = app.settings()
    database = app.database()
    if serve_munge_key:
        from clustermgr.mungekey.server import serve_until_stopped

        raise SystemExit(serve_until_stopped(settings, database))
    if not skip_slurm_check and not dry_run:
        refuse_on_mismatch(app)
    engine = Engine(settings, database)
    if dry_run:
        if not skip_slurm_check:
            from clustermgr.cli.config_cmd import warn_slurm_mismatches

            warn_slurm_mismatches(app, "cm-scale --dry-run")
        print_plan(engine, as_json)
        return
    from clustermgr.runtime.statedir import prepare_state_dir

    owners = prepare_state_dir(
        settings.daemon.state_dir, settings.slurm.user, settings.daemon.admin_group, database.url
    )
    if once:
        run_once(engine, settings.daemon.state_dir, owners)
        return
    from clustermgr.cli.paths import config_path as resolve_config
    from clustermgr.runtime.daemon import Daemon

    raise SystemExit(Daemon(resolve_config(config_path), settings, database).run())


def run_once(engine: object, state_dir: Path, owners: StateOwners) -> None:
    """One cycle as the leader (or not at all), with a heartbeat for the hooks."""
    import os
    import socket as socketlib
    from datetime import UTC, datetime

    from clustermgr.runtime.leader import make_lock
    from clustermgr.runtime.statedir import write_heartbeat
    from clustermgr.scaling.engine import Engine

    assert isinstance(engine, Engine)
    name = f"cm-scale@{socketlib.gethostname()}:{os.getpid()}"
    lock = make_lock(engine.db, name, engine.settings.daemon.lease_s, state_dir)
    if not lock.try_acquire():
        raise ClusterMgrError(f"the leader lease is held by {lock.holder()}; nothing done")
    try:
        engine.db = engine.db.fenced(lock.fence)
        engine.guard = lock.still_leader
        with lock.kept(engine.settings.daemon.heartbeat_period_s):
            beat = {
                "pid": os.getpid(),
                "host": socketlib.gethostname(),
                "role": "once",
                "at": datetime.now(UTC).isoformat(),
            }
            write_heartbeat(state_dir, beat, owners)
            report = engine.cycle()
            if engine.settings.directors and lock.still_leader():
                report.directors = run_directors_inline(engine, report.demand)
            record_once(engine, report)
    finally:
        lock.release()
    echo(report.summary())
    if report.error:
        raise SystemExit(1)


def record_once(engine: object, report: object) -> None:
    """The cycle's record for `clustermgr status` (last cycle, pending demand), in one row
    per host for every `--once` run (a cron of them adds no row per run)."""
    import os
    import socket as socketlib
    from datetime import UTC, datetime

    from clustermgr.db.models import DaemonStatus
    from clustermgr.policy.fit import burst_demand
    from clustermgr.scaling.engine import CycleReport, Engine

    assert isinstance(engine, Engine) and isinstance(report, CycleReport)
    host, now = socketlib.gethostname(), datetime.now(UTC)
    try:
        with engine.db.session() as session:
            row_id = f"{host}:once"
            row = session.get(DaemonStatus, row_id) or DaemonStatus(id=row_id, started_at=now)
            row.host, row.pid, row.role, row.heartbeat_at = host, os.getpid(), "once", now
            row.last_cycle_at = report.started
            row.last_cycle_ok = report.error is None
            row.last_cycle_summary = report.summary()[:1000]
            row.last_cycle_duration_s = report.duration_s
            if report.view is not None:
                demand = burst_demand(report.view)
                row.pending_jobs, row.pending_gpus = demand.jobs, demand.gpus
            row.cycles_failed = row.cycles_failed_in_row = 0 if report.error is None else 1
            session.add(row)
    except ClusterMgrError as exc:  # the cycle is done; only its record is missing
        log.warning("cycle not recorded for `clustermgr status`: %s", exc)


def run_directors_inline(engine: object, demand: frozenset[str]) -> str:
    """The director lifecycle's pass after the one cycle, its syncs run at once (there is
    no director-sync job to hand them to)."""
    from clustermgr.runtime.director_sync import DirectorSync, director_pass
    from clustermgr.scaling.engine import Engine

    assert isinstance(engine, Engine)
    syncer = DirectorSync(engine.settings, engine.db, inline=True)
    return director_pass(engine.settings, engine.db, engine.provider, [syncer], demand, "cm-scale")


def refuse_on_mismatch(app: object) -> None:
    from clustermgr.cli.config_cmd import slurm_mismatches
    from clustermgr.cli.context import AppContext

    assert isinstance(app, AppContext)
    problems = slurm_mismatches(app)
    if problems:
        for line in problems:
            echo(f"cm-scale: {line}", err=True)
        raise ClusterMgrError(
            f"{len(problems)} mismatch(es) between the templates and slurm.conf; fix them "
            "(`clustermgr slurm conf` prints the lines) or pass --skip-slurm-check"
        )


def print_plan(engine: object, as_json: bool) -> None:
    from clustermgr.cli.plan_output import emit_plan
    from clustermgr.scaling.engine import Engine

    assert isinstance(engine, Engine)
    report = engine.cycle(dry_run=True)
    if report.error:
        raise ClusterMgrError(report.error)
    emit_plan(report, as_json)


def main() -> None:
    debug = "--debug" in sys.argv[1:]
    try:
        cm_scale.main(prog_name="cm-scale", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        echo_click_error(exc)
        sys.exit(exc.exit_code)
    except ClusterMgrError as exc:
        if debug:
            echo_traceback()
        echo_error("cm-scale", str(exc))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(0)

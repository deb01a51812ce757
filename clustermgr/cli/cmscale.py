"""`cm-scale`: the scaling daemon. `--once` runs one full cycle and exits."""

from __future__ import annotations

import logging
import signal
import socket
import sys
from pathlib import Path
from types import FrameType

import click

from clustermgr import __version__
from clustermgr.errors import ClusterMgrError

log = logging.getLogger("cm-scale")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="cm-scale")
@click.option("--config", "config_path", envvar="CLUSTERMGR_CONFIG", help="Config file.")
@click.option("--db", "db_url", help="Database URL (env CLUSTERMGR_DB).")
@click.option("--once", is_flag=True, help="Run one cycle (observe, decide, act, reconcile).")
@click.option("--dry-run", is_flag=True, help="Decide and print the plan; act on nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: print the plan as JSON.")
@click.option("--skip-slurm-check", is_flag=True, help="Start even if slurm.conf mismatches.")
@click.option("--debug", is_flag=True, help="Debug logging and tracebacks.")
def cm_scale(
    config_path: str | None,
    db_url: str | None,
    once: bool,
    dry_run: bool,
    as_json: bool,
    skip_slurm_check: bool,
    debug: bool,
) -> None:
    """Scale the cluster's cloud nodes with the configured policies."""
    from clustermgr.cli.context import AppContext
    from clustermgr.scaling.engine import Engine

    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app = AppContext(config_path=config_path, db_url=db_url, debug=debug)
    settings = app.settings()
    database = app.database()
    if not skip_slurm_check and not dry_run:
        refuse_on_mismatch(app)
    engine = Engine(settings, database)
    if dry_run:
        print_plan(engine, as_json)
        return
    from clustermgr.workload.hooks import ensure_spool

    ensure_spool(settings.daemon.state_dir)
    if once:
        report = engine.cycle()
        click.echo(report.summary())
        if report.error:
            raise SystemExit(1)
        return
    run_forever(engine, settings.daemon.state_dir / "cm-scale.sock", settings.daemon.interval_s)


def refuse_on_mismatch(app: object) -> None:
    from clustermgr.cli.config_cmd import slurm_mismatches
    from clustermgr.cli.context import AppContext

    assert isinstance(app, AppContext)
    problems = slurm_mismatches(app)
    if problems:
        for line in problems:
            click.echo(f"cm-scale: {line}", err=True)
        raise ClusterMgrError(
            f"{len(problems)} mismatch(es) between the templates and slurm.conf; fix them "
            "(`clustermgr slurm conf` prints the lines) or pass --skip-slurm-check"
        )


def print_plan(engine: object, as_json: bool) -> None:
    from clustermgr.cli.output import emit
    from clustermgr.cli.plan_output import PLAN_KEYS, plan_rows
    from clustermgr.scaling.engine import Engine

    assert isinstance(engine, Engine)
    report = engine.cycle(dry_run=True)
    if report.error:
        raise ClusterMgrError(report.error)
    assert report.plan is not None
    emit(plan_rows(report.plan), PLAN_KEYS, as_json, "Plan")


def run_forever(engine: object, socket_path: Path, interval_s: float) -> None:
    """Cycle every interval, earlier when a hook pokes the socket; SIGTERM ends it cleanly
    after the current cycle (a cycle is never cut in half)."""
    from clustermgr.scaling.engine import Engine

    assert isinstance(engine, Engine)
    stopping = False

    def on_term(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        log.info("signal %d: finishing the current cycle, then exiting", signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    socket_path.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake:
        wake.bind(str(socket_path))
        socket_path.chmod(0o666)
        wake.settimeout(interval_s)
        while not stopping:
            report = engine.cycle()
            log.info("%s (%.2f s)", report.summary(), report.duration_s)
            if stopping:
                break
            try:
                wake.recv(64)
                while True:  # drain a burst of pokes into one cycle
                    wake.settimeout(0.2)
                    wake.recv(64)
            except (TimeoutError, BlockingIOError, InterruptedError):
                pass
            finally:
                wake.settimeout(interval_s)
    socket_path.unlink(missing_ok=True)


def main() -> None:
    debug = "--debug" in sys.argv[1:]
    try:
        cm_scale.main(prog_name="cm-scale", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except ClusterMgrError as exc:
        if debug:
            raise
        click.echo(f"cm-scale: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(0)

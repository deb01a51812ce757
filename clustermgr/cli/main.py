"""`clustermgr`: the admin CLI. Subcommands load lazily so `--version` stays fast."""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

from clustermgr import __version__
from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, echo_click_error, echo_error, echo_traceback
from clustermgr.core.errors import ClusterMgrError

SUBCOMMANDS = {
    "catalog": "clustermgr.cli.providers_cmd:catalog",
    "completion": "clustermgr.cli.completion_cmd:completion",
    "config": "clustermgr.cli.config_cmd:config",
    "db": "clustermgr.cli.db_cmd:db",
    "directors": "clustermgr.cli.directors_cmd:directors",
    "events": "clustermgr.cli.nodes_cmd:events",
    "health-check": "clustermgr.cli.health_cmd:health_check",
    "images": "clustermgr.cli.images_cmd:images",
    "ldap": "clustermgr.cli.ldap_cmd:ldap",
    "nodes": "clustermgr.cli.nodes_cmd:nodes",
    "policy": "clustermgr.cli.policy_cmd:policy",
    "providers": "clustermgr.cli.providers_cmd:providers",
    "simulate": "clustermgr.cli.simulate_cmd:simulate",
    "slurm": "clustermgr.cli.slurm_cmd:slurm",
    "status": "clustermgr.cli.status_cmd:status",
    "templates": "clustermgr.cli.providers_cmd:templates",
    "transfers": "clustermgr.cli.transfers_cmd:transfers",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when they run (or are listed)."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, _, attr = self.lazy[cmd_name].partition(":")
            command: click.Command = getattr(importlib.import_module(module_name), attr)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup, lazy=SUBCOMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, "--version", prog_name="clustermgr")
@click.option(
    "--config",
    "config_path",
    envvar="CLUSTERMGR_CONFIG",
    help="Config file [default: /etc/clustermgr/clustermgr.toml; env CLUSTERMGR_CONFIG].",
)
@click.option("--db", "db_url", help="Database URL (overrides [database].url; env CLUSTERMGR_DB).")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logging.")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, db_url: str | None, debug: bool) -> None:
    """Manage a Slurm cluster that bursts into AWS, Azure and OpenStack."""
    from clustermgr.core.logsafe import configure

    configure(logging.DEBUG if debug else logging.WARNING)
    ctx.obj = AppContext(config_path=config_path, db_url=db_url, debug=debug)
    ctx.call_on_close(ctx.obj.close)


def main(argv: list[str] | None = None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="clustermgr", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        echo_click_error(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        echo("aborted", err=True)
        sys.exit(1)
    except ClusterMgrError as exc:
        if debug:
            echo_traceback()
        echo_error("clustermgr", str(exc))
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(1)
    except KeyboardInterrupt:
        echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(0)

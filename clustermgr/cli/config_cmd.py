"""`clustermgr config check`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo

if TYPE_CHECKING:
    from clustermgr.config import Settings
    from clustermgr.db.models import InstanceTypeRow


@click.group()
def config() -> None:
    """Configuration file."""


@config.command()
@click.option("--no-slurm", is_flag=True, help="Do not compare with the running Slurm.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_obj
def check(app: AppContext, no_slurm: bool, as_json: bool) -> None:
    """Validate the configuration and compare it with the running Slurm.

    Exit 2 with one line per problem (invalid config, a provider whose cloud SDK is not
    installed, a template that does not match slurm.conf, a power-saving hook SlurmUser
    cannot run, a missing transfer command, an instance type its provider's cached catalog
    does not offer); exit 1 when Slurm cannot be asked. With --json the result is one object
    (`ok`, the counts, `warnings`, `slurm_problems`); an invalid config is still one line
    on stderr, exit 2.
    """
    from clustermgr.cli.output import emit_json
    from clustermgr.cli.paths import config_path
    from clustermgr.config.exposure import exposed_secret_files
    from clustermgr.imaging.launch_images import check_template_images
    from clustermgr.policy.loader import load_chain
    from clustermgr.runtime.statedir import resolve_owners

    settings = app.settings()
    load_chain(list(settings.policy.chain))  # a policy that cannot load: one line, exit 2
    resolve_owners(settings.slurm.user, settings.daemon.admin_group)  # no such account: exit 2
    check_template_images(settings)  # neither an image definition nor a machine image: exit 2
    check_provider_sdks(settings)  # a provider whose SDK is not installed: exit 2
    path = config_path(app.config_path)
    slots = sum(len(t.node_names) for t in settings.templates)
    chain = [ref.name for ref in settings.policy.chain]
    warnings = [*exposed_secret_files(settings, path), *database_password_warnings(settings)]
    warnings += settings.ldap.clear_text_warnings() if settings.ldap else []
    from clustermgr.providers.catalog import offered_by_rows, unfit_fabrics, unoffered_types

    rows = cached_types(app)
    problems = unoffered_types(settings, offered_by_rows(rows)) + unfit_fabrics(settings, rows)
    problems += transfer_command_problems(settings)
    problems += [] if no_slurm else slurm_mismatches(app)
    if as_json:
        emit_json(
            {
                "config": str(path),
                "ok": not problems,
                "providers": len(settings.providers),
                "templates": len(settings.templates),
                "cloud_node_slots": slots,
                "policy_chain": chain,
                "warnings": warnings,
                "slurm_checked": not no_slurm,
                "slurm_problems": problems,
            }
        )
        if problems:
            raise SystemExit(2)
        return
    echo(
        f"{path}: OK ({len(settings.providers)} providers, "
        f"{len(settings.templates)} templates, {slots} cloud node slots)"
    )
    echo(f"policy chain: {', '.join(chain) or 'none'}: every policy loads with its options")
    for warning in warnings:
        echo(warning, err=True)
    for line in problems:
        echo(line)
    if problems:
        raise SystemExit(2)
    if not no_slurm:
        echo("slurm: running configuration matches the templates")


def database_password_warnings(settings: Settings) -> list[str]:
    """Why the password [database] keeps apart cannot be read here (what cm-scale would
    refuse to start with), one line naming the place; none when it reads, or when the
    config's URL is not the one used."""
    import os

    from clustermgr.config.dbpassword import read_database_password
    from clustermgr.core.errors import ConfigError

    if os.environ.get("CLUSTERMGR_DB"):
        return []
    try:
        read_database_password(settings.database)
    except ConfigError as exc:
        return [f"warning: {exc}"]
    return []


def check_provider_sdks(settings: Settings) -> None:
    """Each provider's package and cloud SDK import, as cm-scale's first cycle would: an
    install without the `azure` extra fails here, naming the pip command, not in the daemon."""
    from clustermgr.providers.registry import provider_class

    for kind in sorted({provider.type for provider in settings.providers}):
        provider_class(kind)


def transfer_command_problems(settings: Settings) -> list[str]:
    """cmsub's transfer jobs run `[staging] transfer_command` as the user: it must be there."""
    import os

    command = settings.staging.transfer_command
    if not settings.staging.regions or os.access(command, os.X_OK):
        return []
    return [
        f"staging: transfer_command {command} is not an executable file: set [staging] "
        "transfer_command to this install's cmsub-transfer (the default)"
    ]


def slurm_mismatches(app: AppContext) -> list[str]:
    """The running Slurm vs the templates (and the cached catalog, when there is one)."""
    from clustermgr.workload.slurm import SlurmCli
    from clustermgr.workload.slurmconf import check_against_slurm, facts_from_rows

    settings = app.settings()
    slurm = SlurmCli(settings.slurm.bin_dir, settings.slurm.command_timeout_s)
    return check_against_slurm(
        settings, slurm.config_values(), slurm.nodes(), facts_from_rows(cached_types(app))
    )


def warn_slurm_mismatches(app: AppContext, what: str) -> None:
    """For commands that go on despite them (nodes sync, the dry runs): each mismatch as a
    warning on stderr, and that cm-scale will refuse to start until they are fixed."""
    from clustermgr.core.errors import ClusterMgrError

    try:
        problems = slurm_mismatches(app)
    except ClusterMgrError as exc:
        echo(f"warning: {what}: slurm.conf not compared with the templates: {exc}", err=True)
        return
    for line in problems:
        echo(f"warning: {line}", err=True)
    if problems:
        echo(
            f"warning: {what}: {len(problems)} mismatch(es) with slurm.conf; cm-scale refuses "
            "to start until they are fixed (`clustermgr config check`)",
            err=True,
        )


def cached_types(app: AppContext) -> list[InstanceTypeRow]:
    """The cached catalog rows, or none when there is no usable database (a password that
    cannot be read is one of config check's warnings)."""
    from clustermgr.core.errors import ConfigError, DatabaseError
    from clustermgr.providers.catalog import cached_catalog

    try:
        database = app.existing_database()
        if database is None:
            return []
        with database.session() as session:
            return cached_catalog(session)
    except (DatabaseError, ConfigError):
        return []

"""`clustermgr images list|show|render|sync|status|copies|push-secrets`: image definitions
and their replication to the cloud directors."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from clustermgr.cli.context import AppContext
from clustermgr.cli.output import echo, echo_error, emit, emit_document, emit_json, progress_label

if TYPE_CHECKING:
    from clustermgr.config import Settings
    from clustermgr.imaging.definitions import LoadedImage
    from clustermgr.imaging.replication import ProgressCallback, ReplicaResult, SyncReport

STATUS_COLUMNS = (
    "image",
    "revision",
    "director",
    "state",
    "bytes_sent",
    "verified_at",
    "error",
)
COPY_COLUMNS = ("image", "provider", "region", "source_image", "image_id", "state", "error")


@click.group()
def images() -> None:
    """Node image definitions and their replication to the cloud directors."""


def _settings_or_default(app: AppContext) -> Settings:
    from clustermgr.config import Settings

    return app.settings_if_any() or Settings()


def _loaded(app: AppContext) -> list[LoadedImage]:
    from clustermgr.imaging.definitions import images_dir, load_images

    return load_images(images_dir(app.settings_if_any()))


def _definition_row(image: LoadedImage) -> dict[str, Any]:
    definition = image.definition
    return {
        "name": definition.name,
        "description": definition.description,
        "tree": str(definition.tree),
        "director_path": definition.director_path,
        "user_data": definition.user_data,
        "base": {
            kind: base.model_dump(exclude_none=True) for kind, base in definition.base.items()
        },
        "nfs_mounts": [mount.model_dump() for mount in definition.nfs_mounts],
        "source": str(image.source),
    }


@images.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_images(app: AppContext, as_json: bool) -> None:
    """Image definitions, one TOML each."""
    rows = []
    for image in _loaded(app):
        row = _definition_row(image)
        row["clouds"] = sorted(image.definition.base)
        rows.append(row)
    emit(rows, ("name", "clouds", "tree", "description"), as_json, "Images")


@images.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show(app: AppContext, name: str, as_json: bool) -> None:
    """One image definition, with its latest revision when the database has one."""
    from clustermgr.imaging.definitions import find_image, images_dir

    image = find_image(images_dir(app.settings_if_any()), name)
    row = _definition_row(image)
    row["revision"] = _latest_revision(app, name)
    if as_json:
        emit_json(row)
        return
    for key, value in row.items():
        if key == "base":
            for kind, base in value.items():
                echo(f"base.{kind}: {' '.join(f'{k}={v}' for k, v in base.items())}")
        elif key == "nfs_mounts":
            for mount in value:
                echo(f"nfs_mount: {mount['server']}:{mount['export']} -> {mount['path']}")
        else:
            echo(f"{key}: {'-' if value is None else value}")


def _latest_revision(app: AppContext, name: str) -> str | None:
    from clustermgr.imaging.tree_manifest import latest_image_row

    db = app.existing_database()
    if db is None:
        return None
    with db.session() as session:
        row = latest_image_row(session, name)
        return row.version if row else None


@images.command()
@click.argument("name")
@click.option("--provider", "provider", help="A provider name from the config, or a cloud type.")
@click.option("--director-address", default="", help="The region's director address.")
@click.option("--controller-version", default="", help="slurmctld's version (refuse newer slurmd).")
@click.pass_obj
def render(
    app: AppContext,
    name: str,
    provider: str | None,
    director_address: str,
    controller_version: str,
) -> None:
    """Print the image's user-data with the cluster's facts (no secret is ever in it)."""
    from clustermgr.core.errors import UsageError
    from clustermgr.core.kinds import image_types
    from clustermgr.imaging.definitions import (
        facts_for,
        find_image,
        images_dir,
    )

    settings = _settings_or_default(app)
    image = find_image(images_dir(app.settings_if_any()), name)
    if provider is None:
        provider_type = next(iter(image.definition.base), "local")
    elif provider in image_types():
        provider_type = provider
    elif any(p.name == provider for p in settings.providers):
        provider_type = settings.provider(provider).type
    else:
        known = ", ".join([*image_types(), *(p.name for p in settings.providers)])
        raise UsageError(f"--provider {provider!r}: not a provider or cloud type (known: {known})")
    facts = facts_for(settings, provider_type, director_address, controller_version)
    from clustermgr.imaging.definitions import render as render_image

    emit_document(render_image(image, facts))


@images.command()
@click.argument("name", required=False)
@click.option("--director", help="Only this director (any state).")
@click.option("--checksum", is_flag=True, help="Compare every file by content (a repair sync).")
@click.option("--no-machine-images", is_flag=True, help="Skip the AWS base image copies.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_obj
def sync(
    app: AppContext,
    name: str | None,
    director: str | None,
    checksum: bool,
    no_machine_images: bool,
    as_json: bool,
) -> None:
    """Record a revision of each image tree that changed, rsync it to every serving director
    (or --director) and verify each copy. Exit 1 unless every copy verified."""
    from clustermgr.cli.privilege import require_root

    require_root("images sync")
    from clustermgr.imaging.replication import sync_all

    settings = app.settings()
    db = app.database()
    kwargs: dict[str, Any] = {
        "image": name,
        "director": director,
        "force_checksum": checksum,
        "machine_images": not no_machine_images,
    }
    if sys.stdout.isatty() and not as_json:
        report = _sync_with_bar(
            lambda progress: sync_all(db, settings, on_progress=progress, **kwargs)
        )
    else:
        report = sync_all(db, settings, **kwargs)
    if as_json:
        emit_json(
            {
                "revisions": [dataclasses.asdict(r) for r in report.revisions],
                "replicas": [_result_row(r) for r in report.replicas],
                "machine_images": [dataclasses.asdict(m) for m in report.machine_images],
                "errors": report.errors,
            }
        )
    else:
        _print_report(report)
    if not report.ok:
        raise SystemExit(1)


def _result_row(result: ReplicaResult) -> dict[str, Any]:
    row = dataclasses.asdict(result)
    row["state"] = result.state.value
    return row


def _print_report(report: SyncReport) -> None:
    for revision in report.revisions:
        news = "new revision" if revision.created else "unchanged"
        echo(
            f"image {revision.name}: {revision.version} ({news}; {revision.file_count} files, "
            f"{revision.size_bytes} bytes)"
        )
    for r in report.replicas:
        share = 100.0 * r.bytes_sent / r.tree_bytes if r.tree_bytes else 0.0
        line = (
            f"{r.image} {r.version} -> {r.director}: {r.state.value}; sent {r.bytes_sent} bytes "
            f"({share:.2f}% of the tree), {r.files_sent} files in {r.sync_seconds:.2f} s, "
            f"verified in {r.verify_seconds:.2f} s"
        )
        echo(line + (" [checksum sync]" if r.checksum_sync else ""))
        if r.error:
            echo(f"  {r.error}")
    for m in report.machine_images:
        line = f"machine image {m.image} {m.provider}/{m.region}: {m.state} {m.image_id or ''}"
        echo(line.rstrip() + (f" ({m.error})" if m.error else ""))
    for error in report.errors:
        echo_error("clustermgr", error)


def _sync_with_bar(run: Any) -> SyncReport:
    from rich.progress import BarColumn, Progress, TextColumn

    tasks: dict[tuple[str, str], Any] = {}
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%")
    ) as bar:

        def progress(update: Any) -> None:
            key = (update.image, update.director)
            if key not in tasks:
                label = progress_label(f"{update.image} -> {update.director}")
                tasks[key] = bar.add_task(label, total=100)
            bar.update(tasks[key], completed=update.percent)

        callback: ProgressCallback = progress
        report: SyncReport = run(callback)
    return report


@images.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def status(app: AppContext, as_json: bool) -> None:
    """Each image's replica on each director: revision, state, bytes sent, verified at."""
    from clustermgr.imaging.status import replica_status

    db = app.database()
    with db.session() as session:
        rows = [dataclasses.asdict(r) for r in replica_status(session)]
    emit(rows, STATUS_COLUMNS, as_json, "Image replicas")


@images.command()
@click.argument("name", required=False)
@click.option("--wait", "wait_s", type=float, default=0.0, help="Wait up to this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def copies(app: AppContext, name: str | None, wait_s: float, as_json: bool) -> None:
    """Base machine-image copies in the regions in use (AWS CopyImage, Azure gallery
    replication, OpenStack Glance uploads, which run here to their end): start missing ones,
    show their state."""
    from clustermgr.cli.privilege import require_root

    require_root("images copies")
    from clustermgr.imaging.machine_images import copy_base_images, wait_available

    settings = app.settings()
    db = app.database()
    rows: list[dict[str, Any]] = []
    for image in _loaded(app):
        if name is not None and image.name != name:
            continue
        found = copy_base_images(db, settings, image)
        if wait_s > 0:
            found = wait_available(db, settings, image.name, wait_s, poll_s=min(15.0, wait_s))
        rows.extend(dataclasses.asdict(m) for m in found)
    emit(rows, COPY_COLUMNS, as_json, "Machine images")


@images.command("push-secrets")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_obj
def push_secrets(app: AppContext, path: Path) -> None:
    """Write the rsync daemon secrets file of a director's push module to PATH (root 0600):
    the `clustermgr:<password>` line a cloud director's image bakes in, so only the head
    can write its copy of the images (docs/directors.md). The password is derived from the
    munge key, the same on every head; it is printed nowhere."""
    from clustermgr.cli.privilege import require_root

    require_root("images push-secrets")
    from clustermgr.directors import push_auth

    settings = app.settings()
    target = path if path.is_absolute() else Path.cwd() / path
    password = push_auth.push_password(Path(settings.slurm.munge_key_path))
    push_auth.ensure_secrets_file(target, password, "images push-secrets:")
    echo(f"wrote {target} (root 0600): the push module's `secrets file`")

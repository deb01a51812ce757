"""Cloud machine images: an image's base machine image copied into each region in use.

The regions in use are those of the providers that templates launch in whose type offers
machine-image copy (clustermgr.providers.capabilities.MachineImages: AWS CopyImage, an
Azure gallery version replicated, an upload into OpenStack Glance) and for whose type the
image names a base. A copy is a `machine_images` row: `pending` with the new image id once
the copy is accepted, `available` when the cloud says so, `failed` when the copy failed or
the cloud refused it for good (throttling and transient errors leave it to the next run).
In the base image's own region no copy is made: the row is `available` with the base image
itself. Calls go through the provider package's own clients and error table, never a
second copy, and never an import of a cloud's package.

An upload (OpenStack: the head streams the image from the source region's Glance into the
target's) takes as long as the image takes to move, so a scale cycle only requests it (a
`pending` row without an image id) and cm-scale's director-sync job makes it
(`upload_requested`), as `clustermgr images sync` does; the row is `available` once the
copy is verified and active, `failed` with the reason otherwise (retried after
`[images] sync_interval_s`, or by `clustermgr images sync`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import select

from clustermgr.config import ProviderSettings, Settings
from clustermgr.core.errors import ConfigError, ErrorKind, ProviderError
from clustermgr.db.database import Database
from clustermgr.db.models import MachineImage
from clustermgr.providers import capabilities
from clustermgr.providers.base import TAG_CLUSTER
from clustermgr.providers.capabilities import MachineImages

if TYPE_CHECKING:
    from clustermgr.imaging.definitions import LoadedImage

log = logging.getLogger(__name__)

RETRY_LATER = frozenset({ErrorKind.THROTTLED, ErrorKind.TRANSIENT})
TAG_IMAGE = "clustermgr-image"


@dataclass(frozen=True)
class MachineImageStatus:
    image: str
    provider: str
    region: str
    source_image: str
    image_id: str | None
    state: str  # pending, available, failed
    error: str
    requested_at: datetime | None
    available_at: datetime | None


def regions_in_use(settings: Settings, kind: str) -> list[ProviderSettings]:
    """Providers of type `kind` that at least one template launches in (one region each)
    and whose type offers machine-image copy (a type whose package is not installed
    launches nothing here either)."""
    used = {t.provider for t in settings.templates}
    return [
        p
        for p in settings.providers
        if p.type == kind and p.name in used and _copier(p) is not None
    ]


def _copier(provider: ProviderSettings) -> MachineImages | None:
    try:
        return capabilities.find_machine_images(provider)
    except ConfigError:  # its SDK is not installed: nothing to copy there
        return None


def _status(row: MachineImage) -> MachineImageStatus:
    return MachineImageStatus(
        image=row.image_name,
        provider=row.provider_name,
        region=row.region,
        source_image=row.source_image,
        image_id=row.image_id,
        state=row.state,
        error=row.error,
        requested_at=row.requested_at,
        available_at=row.available_at,
    )


def copy_base_images(
    db: Database, settings: Settings, image: LoadedImage
) -> list[MachineImageStatus]:
    """Start a copy of the image's base image into every region in use that lacks one,
    then bring every copy's state up to date. Returns the image's rows. An upload (OpenStack
    Glance) runs here, to its end: call this only where that may take long (`clustermgr
    images sync`, the director-sync job), never in a scale cycle."""
    copied = False
    for kind, base in image.definition.base.items():
        providers = regions_in_use(settings, kind)
        if base.region is None:  # a Glance image named in every region: nothing to upload
            providers = [p for p in providers if not _uploads(p)]
        if providers:
            source_region = base.region or providers[0].region
            for provider in providers:
                _copy_into(db, settings, image.name, base.image, provider, source_region)
            copied = True
    return refresh(db, settings, image.name) if copied else []


def start_copies(
    db: Database, settings: Settings, image: LoadedImage, providers: Collection[str]
) -> list[MachineImageStatus]:
    """What cm-scale does for launches that wait for a copy: a copy requested into each of
    `providers`' regions that has none for the base image yet (or whose request the cloud
    did not accept yet: throttled), then every pending copy of the image asked for its
    state. A failed copy is left to `clustermgr images sync` (a copy the cloud refuses for
    good would be asked for again every cycle). An upload is only requested here (a pending
    row without an image id): the director-sync job makes it (`upload_requested`)."""
    wanted = [p for p in settings.providers if p.name in providers]
    for provider in wanted:
        base = image.definition.base.get(provider.type)
        if base is not None and provider in regions_in_use(settings, provider.type):
            region = base.region or provider.region
            _copy_into(
                db, settings, image.name, base.image, provider, region, only_new=True, upload=False
            )
    return refresh(db, settings, image.name)


def upload_requested(
    db: Database, settings: Settings, images: Mapping[str, LoadedImage], retry_after_s: float
) -> list[MachineImageStatus]:
    """The director-sync job's part: every copy that is an upload (OpenStack Glance) and was
    requested (by a waiting launch) or failed more than `retry_after_s` ago, made now, one
    after the other, for the images in `images`. Returns the rows it made or retried."""
    providers = {p.name: p for p in settings.providers}
    due = datetime.now(UTC) - timedelta(seconds=retry_after_s)
    with db.session() as session:
        rows = session.scalars(select(MachineImage).order_by(MachineImage.id)).all()
        todo = [
            (row.image_name, providers[row.provider_name], row.id)
            for row in rows
            if row.image_name in images
            and row.provider_name in providers
            and row.region == providers[row.provider_name].region
            and (
                (row.state == "pending" and row.image_id is None)
                or (row.state == "failed" and _naive(row.requested_at) <= _naive(due))
            )
            and _uploads(providers[row.provider_name])
        ]
    done: list[int] = []
    for name, provider, row_id in todo:
        base = images[name].definition.base.get(provider.type)
        if base is None or base.region is None:
            continue
        _copy_into(db, settings, name, base.image, provider, base.region)
        done.append(row_id)
    with db.session() as session:
        made = [session.get(MachineImage, row_id) for row_id in done]
        return [_status(row) for row in made if row is not None]


def _uploads(provider: ProviderSettings) -> bool:
    copier = _copier(provider)
    return copier is not None and copier.uploads


def _naive(when: datetime) -> datetime:
    """SQLite gives back naive UTC datetimes, PostgreSQL aware ones."""
    return when.replace(tzinfo=None) if when.tzinfo else when


def _copy_into(
    db: Database,
    settings: Settings,
    image: str,
    source: str,
    provider: ProviderSettings,
    source_region: str,
    only_new: bool = False,
    upload: bool = True,
) -> None:
    """The provider's row for `image`, made or reset for `source`; a copy requested.
    `only_new`: a row already there for `source` is left as it is, unless its copy was
    never accepted (a throttled request is asked again). `upload`: a copy that is an upload
    is made here, to its end (the row is written before and after, never held open during
    it); otherwise it stays requested."""
    with db.session() as session:
        row = session.scalars(
            select(MachineImage).filter_by(
                image_name=image, provider_name=provider.name, region=provider.region
            )
        ).one_or_none()
        settled = row is not None and (row.image_id is not None or row.state == "failed")
        if only_new and row is not None and row.source_image == source and settled:
            return  # accepted (refresh follows it) or failed (images sync retries it)
        if row is None:
            row = MachineImage(
                image_name=image,
                provider_name=provider.name,
                region=provider.region,
                source_image=source,
                state="pending",
                error="",
            )
            session.add(row)
        elif row.source_image != source or (row.state == "failed" and not row.image_id):
            row.source_image, row.image_id, row.state, row.error = source, None, "pending", ""
            row.available_at = None
        if row.image_id is not None or row.state == "failed":
            return
        if provider.region == source_region:
            row.requested_at = datetime.now(UTC)
            row.image_id, row.state, row.available_at = source, "available", row.requested_at
            return
        if _uploads(provider):
            if not upload:
                return  # requested: the director-sync job uploads it
            row.requested_at = datetime.now(UTC)
            session.flush()
            row_id = row.id
        else:
            row.requested_at = datetime.now(UTC)
            _request_copy(settings, image, provider, source_region, row)
            return
    _upload(db, settings, image, provider, source_region, row_id)


def _upload(
    db: Database,
    settings: Settings,
    image: str,
    provider: ProviderSettings,
    source_region: str,
    row_id: int,
) -> None:
    """An upload into the provider's region, with no database session open while it runs;
    its outcome recorded on the row (unless the row changed meanwhile)."""
    with db.session() as session:
        row = session.get(MachineImage, row_id)
        if row is None:
            return
        source = row.source_image
    started = time.monotonic()
    log.info(
        "image %s: uploading %s from %s into %s", image, source, source_region, provider.region
    )
    probe = MachineImage(source_image=source, state="pending", error="")
    _request_copy(settings, image, provider, source_region, probe)
    with db.session() as session:
        row = session.get(MachineImage, row_id)
        if row is None or row.source_image != source:
            return  # the definition changed during the upload: the next run copies the new one
        row.image_id, row.error = probe.image_id, probe.error
        row.state = "failed" if probe.state == "failed" else "pending"
        if probe.image_id is not None:  # uploaded, verified and active
            row.state, row.available_at = "available", datetime.now(UTC)
    log.info(
        "image %s into %s: %s after %.0f s%s",
        image,
        provider.region,
        "available" if probe.image_id else probe.state,
        time.monotonic() - started,
        f" ({probe.error})" if probe.error else "",
    )


def _request_copy(
    settings: Settings,
    image: str,
    provider: ProviderSettings,
    source_region: str,
    row: MachineImage,
) -> None:
    """A copy into the provider's region; the row carries the answer or the error."""
    cluster = settings.cluster.name
    token = hashlib.sha256(f"{cluster}/{image}/{row.source_image}/{provider.region}".encode())
    try:
        copier = capabilities.machine_images(provider)
        row.image_id = copier.copy_image(
            row.source_image,
            source_region,
            name=f"{cluster}-{image}-{row.source_image}",
            description=f"clustermgr {cluster}: image {image}, copy of {row.source_image}",
            token=token.hexdigest()[:64],
        )
        copier.tag_image(row.image_id, {TAG_CLUSTER: cluster, TAG_IMAGE: image})
    except ProviderError as err:
        row.error = capabilities.error_line(err)
        if err.kind not in RETRY_LATER and row.image_id is None:
            row.state = "failed"


def refresh(db: Database, settings: Settings, image: str | None = None) -> list[MachineImageStatus]:
    """Ask the cloud for the state of every pending copy (of `image`, or all) and record
    it. A row whose provider is gone from the configuration, or no longer offers image
    copy, stays as it is."""
    providers = {p.name: p for p in settings.providers}
    with db.session() as session:
        query = select(MachineImage).order_by(MachineImage.image_name, MachineImage.region)
        if image is not None:
            query = query.filter_by(image_name=image)
        rows = session.scalars(query).all()
        for row in rows:
            provider = providers.get(row.provider_name)
            copier = _copier(provider) if provider is not None else None
            if row.state != "pending" or row.image_id is None or copier is None:
                continue
            try:
                found = copier.image_state(row.image_id)
            except ProviderError as err:
                row.error = capabilities.error_line(err)
                continue
            if found.state == "available":
                row.state, row.error, row.available_at = "available", "", datetime.now(UTC)
            elif found.state in ("failed", "invalid", "deregistered", "error", "missing"):
                row.state = "failed"
                row.error = f"image {row.image_id} is {found.state}" + (
                    f": {found.reason}" if found.reason else ""
                )
        return [_status(row) for row in rows]


def wait_available(
    db: Database,
    settings: Settings,
    image: str,
    timeout_s: float,
    poll_s: float = 15.0,
) -> list[MachineImageStatus]:
    """Refresh until no copy of `image` is pending or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = refresh(db, settings, image)
        if all(r.state != "pending" for r in rows) or time.monotonic() >= deadline:
            return rows
        time.sleep(poll_s)

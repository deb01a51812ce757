"""Cloud machine images: an image's base machine image (an AWS AMI) copied into each region
in use.

The regions in use are those of the providers that templates launch in whose type offers
machine-image copy (clustermgr.providers.capabilities.MachineImages: AWS CopyImage) and
for whose type the image names a base. A copy is a `machine_images` row: `pending` with
the new image id once the copy is accepted, `available` when the cloud says so, `failed`
when the copy failed or the cloud refused it for good (throttling and transient errors
leave it to the next run). In the base image's own region no copy is made: the row is
`available` with the base image itself. Calls go through the provider package's own
clients and error table, never a second copy, and never an import of a cloud's package.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
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
    then bring every copy's state up to date. Returns the image's rows."""
    copied = False
    for kind, base in image.definition.base.items():
        providers = regions_in_use(settings, kind)
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
    good would be asked for again every cycle)."""
    wanted = [p for p in settings.providers if p.name in providers]
    for provider in wanted:
        base = image.definition.base.get(provider.type)
        if base is not None and provider in regions_in_use(settings, provider.type):
            region = base.region or provider.region
            _copy_into(db, settings, image.name, base.image, provider, region, only_new=True)
    return refresh(db, settings, image.name)


def _copy_into(
    db: Database,
    settings: Settings,
    image: str,
    source: str,
    provider: ProviderSettings,
    source_region: str,
    only_new: bool = False,
) -> None:
    """The provider's row for `image`, made or reset for `source`; a copy requested.
    `only_new`: a row already there for `source` is left as it is, unless its copy was
    never accepted (a throttled request is asked again)."""
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
        row.requested_at = datetime.now(UTC)
        if provider.region == source_region:
            row.image_id, row.state, row.available_at = source, "available", row.requested_at
            return
        _request_copy(settings, image, provider, source_region, row)


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

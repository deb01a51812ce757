"""Cloud machine images: an image's AWS base AMI copied into each region in use.

The regions in use are those of the AWS providers that templates launch in. A copy is a
`machine_images` row: `pending` with the new AMI id once CopyImage answers, `available`
when DescribeImages says so, `failed` when the copy failed or AWS refused it for good
(throttling and transient errors leave it to the next run). In the AMI's own region no
copy is made: the row is `available` with the base AMI itself. Calls go through the AWS
provider's own clients and error table (clustermgr.providers.aws), never a second copy.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import select

from clustermgr.config import ProviderSettings, Settings
from clustermgr.db.engine import Database
from clustermgr.db.models import MachineImage
from clustermgr.errors import ErrorKind
from clustermgr.providers.base import TAG_CLUSTER

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import TagTypeDef

    from clustermgr.directors.imagedefs import LoadedImage

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


def regions_in_use(settings: Settings) -> list[ProviderSettings]:
    """AWS providers that at least one template launches in (one region each)."""
    used = {t.provider for t in settings.templates}
    return [p for p in settings.providers if p.type == "aws" and p.name in used]


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


def _ec2(provider: ProviderSettings) -> EC2Client:
    from clustermgr.providers.aws.client import AwsClients

    return AwsClients(provider).ec2()


def _classify(exc: BaseException) -> tuple[ErrorKind, str]:
    from clustermgr.providers.aws.errors import classify

    failure = classify(exc)
    return failure.kind, f"(Code:{failure.kind.value}) {failure.code}: {failure.message}"


def _sdk_errors() -> tuple[type[BaseException], ...]:
    from clustermgr.providers.aws.errors import SDK_ERRORS

    return SDK_ERRORS


def copy_base_images(
    db: Database, settings: Settings, image: LoadedImage
) -> list[MachineImageStatus]:
    """Start a copy of the image's base AMI into every region in use that lacks one, then
    bring every copy's state up to date. Returns the image's rows."""
    base = image.definition.base.get("aws")
    providers = regions_in_use(settings)
    if base is None or not providers:
        return []
    source_region = base.region or providers[0].region
    for provider in providers:
        with db.session() as session:
            row = session.scalars(
                select(MachineImage).filter_by(
                    image_name=image.name, provider_name=provider.name, region=provider.region
                )
            ).one_or_none()
            if row is None:
                row = MachineImage(
                    image_name=image.name,
                    provider_name=provider.name,
                    region=provider.region,
                    source_image=base.image,
                    state="pending",
                    error="",
                )
                session.add(row)
            elif row.source_image != base.image or (row.state == "failed" and not row.image_id):
                row.source_image, row.image_id, row.state, row.error = (
                    base.image,
                    None,
                    "pending",
                    "",
                )
                row.available_at = None
            if row.image_id is not None or row.state == "failed":
                continue
            row.requested_at = datetime.now(UTC)
            if provider.region == source_region:
                row.image_id, row.state, row.available_at = (
                    base.image,
                    "available",
                    row.requested_at,
                )
                continue
            _request_copy(settings, image.name, provider, source_region, row)
    return refresh(db, settings, image.name)


def _request_copy(
    settings: Settings,
    image: str,
    provider: ProviderSettings,
    source_region: str,
    row: MachineImage,
) -> None:
    """CopyImage into the provider's region; the row carries the answer or the error."""
    cluster = settings.cluster.name
    token = hashlib.sha256(f"{cluster}/{image}/{row.source_image}/{provider.region}".encode())
    try:
        ec2 = _ec2(provider)
        answer = ec2.copy_image(
            SourceImageId=row.source_image,
            SourceRegion=source_region,
            Name=f"{cluster}-{image}-{row.source_image}",
            Description=f"clustermgr {cluster}: image {image}, copy of {row.source_image}",
            ClientToken=token.hexdigest()[:64],
        )
        row.image_id = answer["ImageId"]
        tags: list[TagTypeDef] = [
            {"Key": TAG_CLUSTER, "Value": cluster},
            {"Key": TAG_IMAGE, "Value": image},
        ]
        ec2.create_tags(Resources=[row.image_id], Tags=tags)
    except _sdk_errors() as exc:
        kind, message = _classify(exc)
        row.error = message
        if kind not in RETRY_LATER and row.image_id is None:
            row.state = "failed"


def refresh(db: Database, settings: Settings, image: str | None = None) -> list[MachineImageStatus]:
    """Ask AWS for the state of every pending copy (of `image`, or all) and record it."""
    providers = {p.name: p for p in settings.providers if p.type == "aws"}
    with db.session() as session:
        query = select(MachineImage).order_by(MachineImage.image_name, MachineImage.region)
        if image is not None:
            query = query.filter_by(image_name=image)
        rows = session.scalars(query).all()
        for row in rows:
            provider = providers.get(row.provider_name)
            if row.state != "pending" or row.image_id is None or provider is None:
                continue
            try:
                found = _ec2(provider).describe_images(ImageIds=[row.image_id]).get("Images", [])
            except _sdk_errors() as exc:
                row.error = _classify(exc)[1]
                continue
            state = found[0].get("State", "pending") if found else "missing"
            if state == "available":
                row.state, row.error, row.available_at = "available", "", datetime.now(UTC)
            elif state in ("failed", "invalid", "deregistered", "error", "missing"):
                reason = found[0].get("StateReason", {}).get("Message", "") if found else ""
                row.state = "failed"
                row.error = f"AMI {row.image_id} is {state}" + (f": {reason}" if reason else "")
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

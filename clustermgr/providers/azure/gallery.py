"""Machine-image copy for image replication (clustermgr.providers.capabilities.MachineImages)
on Azure: a Compute Gallery image version replicated into this provider's region.

A gallery image version is one resource that lives in the regions of its publishing
profile's `targetRegions`; a VM in a region boots it by the same id once its replica there
is complete. So the "copy" of a base image `/subscriptions/S/resourceGroups/G/providers/
Microsoft.Compute/galleries/GAL/images/DEF/versions/V` into region R is an update of that
version adding R to `targetRegions` (Gallery Image Versions - Update, a PATCH of
`publishingProfile.targetRegions`, the regions already there kept), and its state is R's
entry in `replicationStatus.summary` (Gallery Image Versions - Get with
`$expand=ReplicationStatus`: `Replicating`, `Completed`, `Failed`). The id to boot is the
version's own; the update is sent without waiting for its long-running operation (it ends
only when every region is replicated: `image_state` follows this region's entry instead).
A marketplace image (`publisher:offer:sku:version`) is in every region: it is its own copy.
A managed image is no gallery version: refused, INVALID.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.azure.client import AzureClients
from clustermgr.providers.azure.errors import SDK_ERRORS, classify
from clustermgr.providers.capabilities import ImageState

if TYPE_CHECKING:
    from azure.mgmt.compute.models import GalleryImageVersion

# replicationStatus.summary[].state -> our image state (an unknown word: still pending)
REPLICA_STATES = {"completed": "available", "failed": "failed", "replicating": "pending"}


@dataclass(frozen=True)
class GalleryVersion:
    group: str
    gallery: str
    image: str
    version: str


def gallery_version(image_id: str) -> GalleryVersion | None:
    """The parts of a gallery image version id; None for anything else."""
    segs = [s for s in image_id.split("/") if s]
    low = [s.lower() for s in segs]
    if "resourcegroups" not in low or "galleries" not in low:
        return None
    at = low.index("galleries")
    if low[at + 2 : at + 3] != ["images"] or low[at + 4 : at + 5] != ["versions"]:
        return None
    if len(segs) != at + 6:
        return None
    group = segs[low.index("resourcegroups") + 1]
    return GalleryVersion(group, segs[at + 1], segs[at + 3], segs[at + 5])


class AzureMachineImages:
    uploads = False  # the cloud copies it

    def __init__(self, clients: AzureClients, region: str) -> None:
        self.clients = clients
        self.region = region

    def copy_image(
        self, source_image: str, source_region: str, name: str, description: str, token: str
    ) -> str:
        """Add this region to the version's target regions (idempotent: a region already
        there is not added twice); the id to boot here is the version's own."""
        from azure.mgmt.compute.models import GalleryImageVersionUpdate

        if _marketplace(source_image):
            return source_image
        where = self._parts(source_image)
        properties = dict(self._get(where, expand=False).get("properties") or {})
        profile = dict(properties.get("publishingProfile") or {})
        regions = [dict(r) for r in profile.get("targetRegions") or []]
        if not any(_same(r.get("name"), self.region) for r in regions):
            # the version's own storage profile and every region it has are sent back as
            # they are: the update replaces the list
            profile["targetRegions"] = [*regions, {"name": self.region}]
            body = {"publishingProfile": profile}
            if "storageProfile" in properties:
                body["storageProfile"] = properties["storageProfile"]
            update = GalleryImageVersionUpdate({"properties": body})
            self._update(where, update, f"replicating {source_image} into {self.region}")
        return source_image

    def tag_image(self, image_id: str, tags: Mapping[str, str]) -> None:
        from azure.mgmt.compute.models import GalleryImageVersionUpdate

        if _marketplace(image_id):
            return
        where = self._parts(image_id)
        merged = {**(self._get(where, expand=False).tags or {}), **tags}
        self._update(where, GalleryImageVersionUpdate(tags=merged), f"tagging {image_id}")

    def image_state(self, image_id: str) -> ImageState:
        if _marketplace(image_id):
            return ImageState("available")
        where = self._parts(image_id)
        try:
            found = self._get(where, expand=True)
        except ProviderError as err:
            if err.code in ("ResourceNotFound", "NotFound", "GalleryImageVersionNotFound"):
                return ImageState("missing")
            raise
        if (found.provisioning_state or "").lower() == "failed":
            return ImageState("failed", f"gallery image version {where.version} failed")
        status = found.replication_status
        for entry in (status.summary or []) if status is not None else []:
            if _same(entry.region, self.region):
                word = str(getattr(entry.state, "value", entry.state) or "")  # an enum member
                state = REPLICA_STATES.get(word.lower(), "pending")
                return ImageState(state, entry.details or "")
        return ImageState("pending")  # the update is not in the summary yet

    # ------------------------------------------------------------------ the SDK calls

    def _parts(self, image_id: str) -> GalleryVersion:
        where = gallery_version(image_id)
        if where is None:
            raise ProviderError(
                ErrorKind.INVALID,
                f"{image_id!r} is no gallery image version id (/subscriptions/S/resourceGroups"
                "/G/providers/Microsoft.Compute/galleries/GAL/images/DEF/versions/V): only "
                "a gallery image version is replicated into other regions",
                provider=self.clients.settings.name,
                code="NotAGalleryImageVersion",
            )
        return where

    def _get(self, where: GalleryVersion, expand: bool) -> GalleryImageVersion:
        extra: dict[str, Any] = {"expand": "ReplicationStatus"} if expand else {}
        try:
            return self.clients.compute().gallery_image_versions.get(
                where.group, where.gallery, where.image, where.version, **extra
            )
        except SDK_ERRORS as exc:
            raise self._error(exc, f"reading gallery image version {where.version}") from None

    def _update(self, where: GalleryVersion, update: Any, what: str) -> None:
        try:
            self.clients.compute().gallery_image_versions.begin_update(
                where.group, where.gallery, where.image, where.version, update, polling=False
            )
        except SDK_ERRORS as exc:
            raise self._error(exc, what) from None

    def _error(self, exc: BaseException, what: str) -> ProviderError:
        failure = classify(exc)
        if failure.kind is ErrorKind.AUTH:
            return self.clients.auth_error(failure.message, failure.code)
        return ProviderError(
            failure.kind,
            f"{what}: {failure.message}",
            provider=self.clients.settings.name,
            code=failure.code,
        )


def _same(region: str | None, other: str) -> bool:
    """Azure names a region in any case and with spaces ("East US" is eastus)."""
    return (region or "").replace(" ", "").lower() == other.replace(" ", "").lower()


def _marketplace(image: str) -> bool:
    return not image.startswith("/") and image.count(":") == 3

"""Machine-image copy for image replication (clustermgr.providers.capabilities.MachineImages)
on OpenStack: an upload from the head into this provider's region's Glance, streamed from
the source region's Glance.

Glance's own import methods do not fit: `copy-image` copies between the stores of one Glance
(one region), and `web-download` needs the image at a URL the target Glance fetches without
credentials, which a private cloud's Glance does not serve. So the head reads the source
image's data (Image API v2 "Download binary image data", openstacksdk `download_image` with
`stream=True`) and sends it, as it arrives, as the new image's data (`create_image` with the
stream as `data`: "Create image", then "Upload binary image data"); one chunk is in memory
at a time. The bytes are hashed on the way with the source's `os_hash_algo`; the copy is
kept only when Glance's own `os_hash_value`, `checksum` and `size` of the new image match
the source's and the bytes sent. A copy that fails or does not match is deleted (openstacksdk
deletes an image whose upload failed; a mismatch is deleted here), so no half-made image is
ever active. The source region is a region of the same clouds.yaml cloud (one Keystone).

The new image is private, named after the copy, and carries the copy's token as a property:
a copy already made (active, same hash) is found by it and reused, and a leftover of an
upload that never finished (the head stopped mid-upload: queued or saving) is deleted before
a new upload starts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.capabilities import ImageState
from clustermgr.providers.openstack.errors import (
    NOT_FOUND_CODES,
    SDK_ERRORS,
    check_answer,
    classify,
)
from clustermgr.providers.skeleton import Failure

T = TypeVar("T")

CHUNK_BYTES = 4 * 1024 * 1024  # read from the source and sent to the target at a time
TOKEN_KEY = "clustermgr-copy-token"  # noqa: S105 (an image property naming the copy)
SOURCE_KEY = "clustermgr-copy-of"  # REGION/IMAGE-ID of the source, for people
# Glance image status -> our image state (Image API v2, "Images": image statuses)
GLANCE_STATES = {
    "active": "available",
    "queued": "pending",
    "saving": "pending",
    "uploading": "pending",
    "importing": "pending",
    "killed": "failed",
    "deactivated": "failed",
    "deleted": "missing",
    "pending_delete": "missing",
}


class Region(Protocol):
    """What the copy needs of the OpenStack provider of one region (provider.py)."""

    name: str
    region: str

    def service(self, name: str) -> Any: ...

    def call(self, what: str, fn: Callable[[], T], operation: str = "") -> T: ...

    def error(self, failure: Failure | BaseException, what: str) -> ProviderError: ...


class GlanceCopies:
    uploads = True  # the head moves the image: only in the director-sync job

    def __init__(self, target: Region, region_of: Callable[[str], Region]) -> None:
        self.target = target
        self.region_of = region_of  # the same cloud in another region (the source's)

    def copy_image(
        self, source_image: str, source_region: str, name: str, description: str, token: str
    ) -> str:
        source = self.region_of(source_region)
        found = self._source(source, source_image)
        images = self.target.service("image")
        reused = self._reuse_or_clear(images, name, token, found)
        if reused is not None:
            return reused
        what = f"reading image {source_image} ({found.id}) from {source_region}'s Glance"
        answer = source.call(
            what,
            lambda: check_answer(source.service("image").download_image(found, stream=True)),
        )
        data = HashingStream(answer, found.size, found.hash_algo or "sha512")
        where = f"uploading image {source_image} into {self.target.region}'s Glance"
        properties = {
            TOKEN_KEY: token,
            SOURCE_KEY: f"{source_region}/{found.id}",
            "description": description,
        }
        try:  # never retried as a whole here: the stream is read once
            made = images.create_image(
                name,
                data=data,
                size=found.size,
                md5=found.checksum,  # kept as the image's owner_specified.openstack.md5
                disk_format=found.disk_format,
                container_format=found.container_format,
                min_disk=found.min_disk or 0,
                min_ram=found.min_ram or 0,
                visibility="private",
                allow_duplicates=True,  # ours are found by their token
                meta=properties,
            )
        except SDK_ERRORS as exc:
            # the source broke off (its error), or the target refused or broke off
            if isinstance(data.failure, ShortRead):
                short = f"{what}: {data.failure}"
                raise self._refused(ErrorKind.TRANSIENT, "ShortRead", short) from None
            raise self._error(data.failure or exc, what if data.failure else where) from None
        finally:
            answer.close()
        self._verify(images, str(made.id), found, data)
        return str(made.id)

    def tag_image(self, image_id: str, tags: Mapping[str, str]) -> None:
        images = self.target.service("image")
        self.target.call(
            f"setting the properties of image {image_id}",
            lambda: images.update_image(image_id, **tags),
        )

    def image_state(self, image_id: str) -> ImageState:
        images = self.target.service("image")
        try:
            found = self.target.call(
                f"reading image {image_id}", lambda: images.get_image(image_id)
            )
        except ProviderError as err:
            if err.code in NOT_FOUND_CODES:
                return ImageState("missing")
            raise
        status = str(found.status or "")
        return ImageState(GLANCE_STATES.get(status, "pending"), f"Glance status {status}")

    # ------------------------------------------------------------------ steps

    def _source(self, source: Region, image: str) -> Any:
        """The source image (by name or id), active; INVALID when it is not there."""
        images = source.service("image")
        where = f"{source.region}'s Glance"
        try:
            found = source.call(
                f"finding image {image!r} in {where}",
                lambda: images.find_image(image, ignore_missing=False),
            )
        except ProviderError as err:
            if err.code == "ConfigException":  # clouds.yaml does not list that region
                raise self._refused(
                    ErrorKind.INVALID,
                    "SourceRegionUnknown",
                    f"the source region {source.region!r} is not a region of the cloud in "
                    f"clouds.yaml: list it under that cloud's `regions` ({err.args[0]})",
                ) from None
            if err.code not in NOT_FOUND_CODES:
                raise
            raise self._refused(
                ErrorKind.INVALID,
                "SourceImageNotFound",
                f"the source image {image!r} is not in {where}: upload it there, or name "
                "the region that holds it ([base.openstack] region)",
            ) from None
        if found.status != "active":
            raise self._refused(
                ErrorKind.INVALID,
                "SourceImageNotActive",
                f"the source image {image!r} in {where} is {found.status}, not active",
            )
        return found

    def _reuse_or_clear(self, images: Any, name: str, token: str, source: Any) -> str | None:
        """A finished copy of ours is reused; an unfinished one (an upload cut off) goes."""
        listed = self.target.call(
            f"listing images named {name}", lambda: list(images.images(name=name))
        )
        for image in listed:
            if (image.properties or {}).get(TOKEN_KEY) != token:
                continue  # not ours
            if image.status == "active" and _same_data(image, source):
                return str(image.id)
            self._delete(images, str(image.id))
        return None

    def _verify(self, images: Any, image_id: str, source: Any, data: HashingStream) -> None:
        """The copy's data is the source's, as Glance and the bytes sent show it; otherwise
        it is deleted and the copy fails (OTHER: the next sync uploads it again)."""
        copy = self.target.call(f"reading image {image_id}", lambda: images.get_image(image_id))
        problems = []
        if copy.status != "active":
            problems.append(f"status {copy.status}")
        if data.sent != source.size or copy.size != source.size:
            problems.append(f"{copy.size} bytes stored, {data.sent} sent, {source.size} expected")
        if (
            source.hash_value
            and source.hash_algo == data.algorithm
            and (data.digest() != source.hash_value)
        ):
            problems.append(f"the {data.algorithm} of the bytes read is not the source's")
        if not _same_data(copy, source):
            problems.append(f"{copy.hash_algo or 'checksum'} differs from the source's")
        if problems:
            self._delete(images, image_id)
            raise self._refused(
                ErrorKind.OTHER,
                "ChecksumMismatch",
                f"the copy of image {source.name} into {self.target.region} does not match "
                f"its source ({'; '.join(problems)}): deleted",
            )

    def _delete(self, images: Any, image_id: str) -> None:
        self.target.call(
            f"deleting image {image_id}",
            lambda: images.delete_image(image_id, ignore_missing=True),
        )

    def _refused(self, kind: ErrorKind, code: str, message: str) -> ProviderError:
        return ProviderError(kind, message, provider=self.target.name, code=code)

    def _error(self, exc: BaseException, what: str) -> ProviderError:
        """openstacksdk wraps a broken-off upload (no HTTP status) in a bare SDKException:
        its cause says what it was (a reset connection is TRANSIENT)."""
        failure = classify(exc)
        if failure.kind is ErrorKind.OTHER and failure.status is None and exc.__cause__:
            failure = classify(exc.__cause__)
        return self.target.error(failure, what)


def _same_data(image: Any, source: Any) -> bool:
    """Glance's hashes of the two images agree (os_hash_value when both have one of the
    same algorithm, else the MD5 `checksum`)."""
    if source.hash_value and image.hash_algo == source.hash_algo:
        return bool(image.hash_value == source.hash_value)
    return bool(source.checksum) and image.checksum == source.checksum


class HashingStream:
    """The source's bytes as the upload reads them: one chunk at a time, hashed on the way
    (requests sends an iterable with a length as a body of that Content-Length)."""

    def __init__(self, answer: Any, size: int | None, algorithm: str) -> None:
        self._chunks: Iterator[bytes] = answer.iter_content(CHUNK_BYTES)
        self.size = size or 0
        # a hash this Python lacks: Glance's own hashes are still compared
        self.algorithm = algorithm if algorithm in hashlib.algorithms_available else "sha512"
        self._hash = hashlib.new(self.algorithm)
        self.sent = 0
        self.failure: BaseException | None = None

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._chunks:
                self._hash.update(chunk)
                self.sent += len(chunk)
                yield chunk
        except SDK_ERRORS as exc:
            self.failure = exc
            raise
        if self.sent != self.size:  # else the target would wait for the bytes still due
            self.failure = ShortRead(f"the source sent {self.sent} of {self.size} bytes")
            raise self.failure

    def digest(self) -> str:
        return self._hash.hexdigest()


class ShortRead(Exception):
    """The source's data ended before its size."""

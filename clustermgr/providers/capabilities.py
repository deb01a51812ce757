"""Optional capabilities a provider offers beyond the Provider seam (base.py).

Image replication and job staging need more of some clouds than launching instances: a
cloud's own copy of a machine image into another region, an object store. Each need is a
Protocol here; a provider package that can meet it implements it inside the package and
offers it from its provider class:

    @classmethod
    def capabilities(cls, settings: ProviderSettings) -> Sequence[object]: ...

A kind declares the ones its type offers (`machine_image_copy`, `object_store` in its
`ProviderKind.capabilities`), so a type that offers none is answered without importing it.
`find_machine_images`, `machine_images` and `object_storage` ask the provider type of a
`[[providers]]` entry for one capability, so directors and staging never import a cloud's
package (the import contract forbids it); a type that does not offer it is one ConfigError
line naming the provider and what it lacks.
A capability raises ProviderError (kind from the cloud's own error table, its code, a
one-line message) and never shows a credential.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from clustermgr.core.errors import ConfigError, ProviderError
from clustermgr.core.kinds import kind_of
from clustermgr.providers.registry import provider_class

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings


@dataclass(frozen=True)
class ImageState:
    """A machine image as the cloud shows it: pending, available, failed (or the cloud's
    own word for gone: invalid, deregistered, error), or missing when it does not know it."""

    state: str
    reason: str = ""


@runtime_checkable
class MachineImages(Protocol):
    """A machine image copied into this provider's region: by the cloud itself (AWS
    CopyImage, an Azure gallery replication), or by an upload from the head (OpenStack
    Glance), which moves the whole image through the head and so runs only in the
    director-sync job or `clustermgr images sync`, never in a scale cycle."""

    uploads: bool  # True: copy_image moves the image itself and returns once it is active

    def copy_image(
        self, source_image: str, source_region: str, name: str, description: str, token: str
    ) -> str:
        """Start the copy (idempotent per `token`); returns the new image's id. An upload
        returns once the copy is verified and active, and leaves no half-made image."""
        ...

    def tag_image(self, image_id: str, tags: Mapping[str, str]) -> None: ...

    def image_state(self, image_id: str) -> ImageState: ...


@dataclass(frozen=True)
class ObjectCredentials:
    """Temporary credentials for the object store, limited by a session policy."""

    access_key_id: str
    secret_access_key: str
    session_token: str

    def __repr__(self) -> str:  # never in a log or a traceback
        return f"ObjectCredentials(access_key_id={self.access_key_id!r}, ...)"


@dataclass(frozen=True)
class StoredObject:
    """An object as the store shows it (its head)."""

    size: int
    sha256: str  # the hex SHA-256 the uploader kept in its metadata; "" when none
    checksum: str  # the store's own SHA-256 (base64; of the parts when multipart); "" when none
    etag: str  # unquoted; a single-part upload's is its MD5


@dataclass(frozen=True)
class BucketAt:
    """A bucket, where it is, and how files move to it: parts of `part_size` bytes
    (multipart from one part on), `workers` parts at once."""

    name: str
    endpoint_url: str | None  # None: the provider's
    part_size: int
    workers: int


Progress = Callable[[int], None]  # bytes moved since its last call


@runtime_checkable
class ObjectBucket(Protocol):
    """One bucket of the store, reached with one set of credentials. Every method raises
    ProviderError (classified by the cloud's error table, one line, no credential)."""

    def put_file(self, path: Path, key: str, sha256: str, progress: Progress) -> None:
        """Upload a file, the store checking each part against the client's SHA-256 on
        receipt; `sha256` (hex, of the whole file) is kept in the object's metadata."""
        ...

    def get_file(self, key: str, path: Path, progress: Progress) -> None: ...

    def put_bytes(self, key: str, body: bytes) -> None: ...

    def get_bytes(self, key: str) -> bytes: ...

    def head(self, key: str) -> StoredObject: ...

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`, in the store's order."""
        ...

    def delete(self, keys: Sequence[str]) -> None: ...

    def presign(self, key: str, method: Literal["get", "put"], expires_s: int) -> str:
        """A URL that gets (or puts) this one object without credentials until it expires."""
        ...


@runtime_checkable
class ObjectStorage(Protocol):
    """The region's object store: a bucket with the provider's own credentials or with
    temporary ones, and temporary credentials scoped by a policy, for a user's transfer
    job."""

    def bucket(self, at: BucketAt, credentials: ObjectCredentials | None = None) -> ObjectBucket:
        """The bucket, reached with `credentials` (None: the provider's own)."""
        ...

    def scoped_credentials(
        self, policy: str, session_name: str, role: str, duration_s: int
    ) -> ObjectCredentials:
        """Credentials limited by the session `policy` (IAM JSON): the `role` assumed when
        given, else a federation token of the provider's own user."""
        ...


def capabilities(settings: ProviderSettings) -> Sequence[object]:
    """What the provider type of `settings` offers for it (nothing when it offers none)."""
    offer = getattr(provider_class(settings.type), "capabilities", None)
    if offer is None:
        return ()
    found: Sequence[object] = offer(settings)
    return found


def find_machine_images(settings: ProviderSettings) -> MachineImages | None:
    """The provider's machine-image copy, or None when its type does not offer one."""
    if "machine_image_copy" not in kind_of(settings.type).capabilities:
        return None  # as its kind declares, without importing the provider
    found = [c for c in capabilities(settings) if isinstance(c, MachineImages)]
    return found[0] if found else None


def machine_images(settings: ProviderSettings) -> MachineImages:
    found = find_machine_images(settings)
    if found is None:
        raise missing(settings, "machine-image copy")
    return found


def object_storage(settings: ProviderSettings) -> ObjectStorage:
    """The provider's object store; one ConfigError line when its type offers none."""
    if "object_store" not in kind_of(settings.type).capabilities:
        raise missing(settings, "object storage")
    found = [c for c in capabilities(settings) if isinstance(c, ObjectStorage)]
    if not found:
        raise missing(settings, "object storage")
    return found[0]


def missing(settings: ProviderSettings, what: str) -> ConfigError:
    return ConfigError(f"provider {settings.name!r} (type {settings.type}) does not offer {what}")


def error_line(err: ProviderError) -> str:
    """A capability's failure as one line: `(Code:KIND) code: message`."""
    return f"(Code:{err.kind.value}) {err.code}: {err}"

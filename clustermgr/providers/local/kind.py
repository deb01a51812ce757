"""The local provider type, as the configuration and the registry see it."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from pydantic import field_validator

from clustermgr.config.base import StrictModel
from clustermgr.core.kinds import ProviderKind


class LocalOptions(StrictModel):
    """The keys only a local [[providers]] entry takes."""

    subnet: str = "10.213.0.0/24"  # the instances' addresses (the bridge holds the first)
    state_dir: Path | None = None  # its instance state file and logs; default under /var/lib
    # lab only: the host path that stands in for an NFS export its instances' user-data
    # mounts ("SERVER:/EXPORT" = "/host/path"; providers/local/cloudinit.py)
    nfs_stand_in: dict[str, Path] = {}

    @field_validator("nfs_stand_in")
    @classmethod
    def _stand_ins(cls, stand_ins: dict[str, Path]) -> dict[str, Path]:
        for export, host_path in stand_ins.items():
            server, colon, path = export.partition(":")
            if not (server and colon and path.startswith("/")) or ".." in PurePosixPath(path).parts:
                raise ValueError(f"{export!r}: a key is SERVER:/EXPORT (an absolute export path)")
            if not host_path.is_absolute():
                raise ValueError(f"{export!r} = {str(host_path)!r}: the host path must be absolute")
        return stand_ins


KIND = ProviderKind(
    type="local",
    provider="clustermgr.providers.local.provider:LocalProvider",
    credential_sources=("none",),
    billing=(1, 0),
    options=LocalOptions,
)

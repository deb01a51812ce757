"""Packages a burst node installs at boot from the mirror its region's director serves.

Air-gapped regions (the DeepOps practice of a local mirror): the mirror is a signed Debian
repository inside the image tree the directors replicate, so a node reads it from the
director's read-only NFS mount (`file:` URI) and never needs a route out. apt is pointed at
that one source (no sources.list, no sources.list.d) and checks the repository's signature
against the keyring named in the definition, which lives in the same verified tree. A
failure (mount missing, bad signature, hash mismatch, package missing) stops the boot
before slurmd starts: a node without its packages never runs jobs.
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator

from clustermgr.nodes.bootstrap import AtTemplate

PACKAGES_TEMPLATE = "packages.sh.tmpl"
# Debian policy 5.6.1 (a package name), optionally pinned as NAME=VERSION (5.6.12)
PACKAGE_PATTERN = r"^[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?$"
# a suite or component: what a Release file may name (no spaces, no quotes)
WORD_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]*$"
NODE_PATH_PATTERN = r"^/[A-Za-z0-9._/+-]*$"


class PackageMirror(BaseModel):
    """`[packages]` of an image definition."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mirror: str = Field(pattern=NODE_PATH_PATTERN)  # the repository root, a path on the node
    suite: str = Field(pattern=WORD_PATTERN)
    components: list[str] = Field(["main"], min_length=1)
    keyring: str = Field(pattern=NODE_PATH_PATTERN)  # the repository's signing key, on the node
    install: list[str] = Field(min_length=1)
    mount_wait_s: int = Field(300, ge=0, le=3600)  # how long the boot waits for the mount

    @field_validator("components")
    @classmethod
    def _components(cls, components: list[str]) -> list[str]:
        for component in components:
            if not re.match(WORD_PATTERN, component):
                raise ValueError(f"{component!r} is not a component name")
        return components

    @field_validator("install")
    @classmethod
    def _package_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(PACKAGE_PATTERN, name):
                raise ValueError(f"{name!r} is not a Debian package name (or NAME=VERSION)")
        return names


def outside_mounts(packages: PackageMirror, director_mounts: list[str]) -> list[str]:
    """The mirror's paths that no director mount holds (each must be read from the
    director's verified tree, not from the machine image or the network)."""
    roots = [PurePosixPath(path) for path in director_mounts]
    return [
        f"{field} {path!r}"
        for field, path in (("mirror", packages.mirror), ("keyring", packages.keyring))
        if not any(PurePosixPath(path).is_relative_to(root) for root in roots)
    ]


def render_packages_script(packages: PackageMirror | None) -> str:
    """The boot step that installs the packages; with none configured it does nothing."""
    text = importlib.resources.files("clustermgr.images").joinpath(PACKAGES_TEMPLATE).read_text()
    if packages is None:
        values = {"mirror": "", "suite": "", "components": "", "keyring": "", "install": ""}
        values["mount_wait_s"] = "0"
    else:
        values = {
            "mirror": packages.mirror,
            "suite": packages.suite,
            "components": " ".join(packages.components),
            "keyring": packages.keyring,
            "install": " ".join(packages.install),
            "mount_wait_s": str(packages.mount_wait_s),
        }
    return AtTemplate(text).substitute(values)

"""Image definitions: one TOML per image in images/ (or [images] definitions_dir).

An image names the base machine image each cloud boots (an AMI, an Azure image reference
or gallery id, a Glance image name, a local instance type), the software image tree on the
head node that the directors replicate, and a user-data template rendered with cluster
facts. The template's `@{name}` placeholders are listed in `ClusterFacts`; the munge key
is delivered by a path on the region's director, never inside the user-data.
"""

from __future__ import annotations

import base64
import importlib.resources
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from clustermgr.config import NAME_PATTERN, Settings
from clustermgr.config.base import first_error
from clustermgr.core.errors import ConfigError, NotFoundError
from clustermgr.core.kinds import image_types
from clustermgr.imaging.nameservice import (
    DirectoryFacts,
    NameService,
    directory_facts,
    render_nameservice_script,
)
from clustermgr.imaging.packages import PackageMirror, outside_mounts, render_packages_script
from clustermgr.nodes.bootstrap import AtTemplate, BootstrapFacts, bootstrap_facts, render_bootstrap

IMAGES_DIR_ENV = "CLUSTERMGR_IMAGES_DIR"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BaseImage(_Strict):
    """The machine image a cloud boots: AMI id, Azure `publisher:offer:sku:version` or
    image/gallery id, Glance image name, local instance type."""

    image: str = Field(min_length=1)
    region: str | None = None  # aws: the region the AMI lives in (copy_image's source)


class NfsMount(_Strict):
    """A mount a node makes at boot; `server` is "head", "director" or a host name."""

    server: str = Field(min_length=1)
    export: str = Field(pattern=r"^/")
    path: str = Field(pattern=r"^/")
    options: str = "defaults,_netdev"


class ImageDefinition(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    tree: Path  # the software image tree on the head node
    director_path: str = Field("/srv/clustermgr/image", pattern=r"^/")  # its copy, on a director
    user_data: str = Field(min_length=1)  # a template file next to the TOML
    base: dict[str, BaseImage] = {}  # by provider type: one that boots images (not on-prem)
    nfs_mounts: list[NfsMount] = []
    packages: PackageMirror | None = None  # installed at boot from the director's mirror
    name_service: NameService | None = None  # users and groups from the director's replica

    @field_validator("base")
    @classmethod
    def _cloud_types(cls, base: dict[str, BaseImage]) -> dict[str, BaseImage]:
        for type_name in base:
            if type_name not in image_types():
                raise ValueError(
                    f"{type_name!r} is not a provider type that boots an image "
                    f"(known: {', '.join(image_types())})"
                )
        return base

    @model_validator(mode="after")
    def _mirror_on_a_director_mount(self) -> ImageDefinition:
        if self.packages is not None:
            director_mounts = [m.path for m in self.nfs_mounts if m.server == "director"]
            outside = outside_mounts(self.packages, director_mounts)
            if outside:
                raise ValueError(
                    f"packages: {' and '.join(outside)} must be under a director mount "
                    f"({', '.join(director_mounts) or 'none in nfs_mounts'}): the mirror is "
                    "read from the director's verified tree"
                )
        return self

    @field_validator("tree")
    @classmethod
    def _absolute(cls, tree: Path) -> Path:
        if not tree.is_absolute():
            raise ValueError(f"must be an absolute path (got {str(tree)!r})")
        return tree


@dataclass(frozen=True)
class LoadedImage:
    """A validated definition and where it came from."""

    definition: ImageDefinition
    source: Path  # the TOML
    template_text: str  # the user-data template's text

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass(frozen=True)
class ClusterFacts:
    """Everything a user-data template may use; each field is an `@{name}` placeholder
    (plus `image`, `director_path`, `nfs_mounts`, `bootstrap_b64`, `packages_b64` and
    `nameservice_b64` from the image itself)."""

    boot: BootstrapFacts
    director_address: str  # the region's director (image tree, LDAP replica)
    revision: str = ""  # the image revision the director serves ("" before any sync)
    directory: DirectoryFacts | None = None  # the replica nodes read users from ([ldap])


def default_images_dir() -> Path:
    return Path(str(importlib.resources.files("clustermgr.images")))


def images_dir(settings: Settings | None) -> Path:
    """$CLUSTERMGR_IMAGES_DIR, else [images] definitions_dir, else the shipped images/."""
    env = os.environ.get(IMAGES_DIR_ENV)
    if env:
        return Path(env)
    if settings is not None and settings.images.definitions_dir is not None:
        return settings.images.definitions_dir
    return default_images_dir()


def load_image(path: Path) -> LoadedImage:
    """One TOML; every failure is one ConfigError line naming the file and the field."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read image definition: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    try:
        definition = ImageDefinition.model_validate(data)
    except ValidationError as exc:
        where = ".".join(str(part) for part in exc.errors()[0]["loc"]) or "(top level)"
        message = first_error(exc)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{path}: {where}: {message}{more}") from None
    if definition.name != path.stem:
        raise ConfigError(
            f"{path}: name: {definition.name!r} must match the file name ({path.stem!r})"
        )
    template = path.parent / definition.user_data
    try:
        text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{path}: user_data: cannot read template {template}: {exc.strerror}"
        ) from None
    for section, step in (("packages", "packages_b64"), ("name_service", "nameservice_b64")):
        if getattr(definition, section) is not None and f"@{{{step}}}" not in text:
            raise ConfigError(
                f"{path}: {section}: the user-data template {template.name} never writes "
                f"@{{{step}}} (the boot step that sets it up): add it, or drop [{section}]"
            )
    return LoadedImage(definition, path, text)


def load_images(directory: Path) -> list[LoadedImage]:
    """Every *.toml of `directory`, by name."""
    if not directory.is_dir():
        raise ConfigError(f"{directory}: no such image definitions directory")
    return [load_image(path) for path in sorted(directory.glob("*.toml"))]


def find_image(directory: Path, name: str) -> LoadedImage:
    path = directory / f"{name}.toml"
    if not path.exists():
        known = ", ".join(p.stem for p in sorted(directory.glob("*.toml"))) or "none"
        raise NotFoundError(f"no image named {name!r} in {directory} (known: {known})")
    return load_image(path)


def facts_for(
    settings: Settings,
    provider_type: str,
    director_address: str,
    controller_version: str = "",
) -> ClusterFacts:
    return ClusterFacts(
        boot=bootstrap_facts(settings, provider_type, controller_version),
        director_address=director_address,
        directory=directory_facts(settings),
    )


def render(image: LoadedImage, facts: ClusterFacts) -> str:
    """The image's user-data for one cloud and director. It carries paths and addresses,
    never key material."""
    definition = image.definition
    boot_script = render_bootstrap(facts.boot)
    values = {
        "cluster": facts.boot.cluster,
        "conf_server": facts.boot.conf_server,
        "provider_type": facts.boot.provider_type,
        "munge_key": facts.boot.munge_key,
        "director_address": facts.director_address,
        "image": definition.name,
        "revision": facts.revision,
        "director_path": definition.director_path,
        "nfs_mounts": _mounts_yaml(definition.nfs_mounts, facts),
        "bootstrap_b64": base64.b64encode(boot_script.encode()).decode(),
        "packages_b64": _b64(render_packages_script(definition.packages)),
        "nameservice_b64": _b64(
            render_nameservice_script(
                definition.name_service, facts.directory, facts.director_address
            )
        ),
    }
    try:
        return AtTemplate(image.template_text).substitute(values)
    except (KeyError, ValueError) as exc:
        raise ConfigError(
            f"{image.source.parent / definition.user_data}: unknown or malformed placeholder "
            f"{exc} (known: {', '.join(sorted(values))})"
        ) from None


def _b64(script: str) -> str:
    return base64.b64encode(script.encode()).decode()


def _mounts_yaml(mounts: list[NfsMount], facts: ClusterFacts) -> str:
    """cloud-init `mounts:` entries, one flow list a line (fstab fields)."""
    if not mounts:
        return "[]"
    lines = []
    for mount in mounts:
        server = {"head": _host(facts.boot.conf_server), "director": facts.director_address}.get(
            mount.server, mount.server
        )
        lines.append(f'\n  - ["{server}:{mount.export}", "{mount.path}", nfs, "{mount.options}"]')
    return "".join(lines)


def _host(address: str) -> str:
    """HOST of HOST[:PORT]."""
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address

"""A template that names an image definition: what its launches boot, and with what user-data.

`[[templates]] image` is either the name of an image definition (images/*.toml) or a raw
machine-image id. A definition's launch boots the image's machine image in the template's
region (the base image in its own region, the copy `machine_images` holds elsewhere, made by
`clustermgr images sync` through the provider's machine-image capability) with the image's
user-data rendered for the region: its director's address, the revision that director
serves, and the launch request's munge-key token.

The definitions the templates name are read with the configuration (`template_definitions`,
at start and on a reload); a cycle reads only the database's copies, directors and
revisions (`region_images`, in observe's session, and only when some template names a
definition). A template whose region has no usable machine image yet waits
(`image_waits`: `(Code:IMAGE) waiting for image ...`): clamp refuses its launches as it
does a director's wait, and cm-scale starts the missing copy
(`machine_images.start_copies`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import NAME_PATTERN, Settings, TemplateSettings
from clustermgr.core.errors import ConfigError
from clustermgr.core.inputs import usable_address
from clustermgr.core.kinds import kind_of
from clustermgr.core.reasons import IMAGE, Reason
from clustermgr.db.models import Director, Image, ImageReplica, MachineImage
from clustermgr.directors.states import SERVING, DirectorState, director_name
from clustermgr.imaging.definitions import (
    ClusterFacts,
    LoadedImage,
    images_dir,
    load_image,
    load_images,
    render,
)
from clustermgr.imaging.machine_images import regions_in_use
from clustermgr.imaging.nameservice import directory_facts
from clustermgr.nodes.bootstrap import KeyFetch, bootstrap_facts

CLOSE_MATCH = 0.8  # difflib ratio above which a raw id is taken for a misspelt image name


class ImageUnavailable(Exception):
    """A template's image cannot be launched in its region yet (one line: what and why)."""


@dataclass(frozen=True)
class RegionImage:
    """What a template naming an image definition launches with in its region, this cycle."""

    image: LoadedImage
    machine_image: str | None  # None: not in the region (yet); `problem` says why
    director_address: str
    revision: str  # the revision the region's director serves ("" before any sync)
    problem: str = ""
    copy_wanted: bool = False  # a copy into the region to start or follow (not a failed one)
    director: str = ""  # the region's director's name while it serves, else ""
    known: frozenset[str] = frozenset()  # every revision of the image the head recorded


def definitions(settings: Settings) -> dict[str, LoadedImage]:
    """The loaded image definitions by name; none when the directory does not exist."""
    directory = images_dir(settings)
    if not directory.is_dir():
        return {}
    return {image.name: image for image in load_images(directory)}


def check_template_images(settings: Settings) -> None:
    """Every template's `image` names a loaded definition (with a base for the template's
    provider type) or is a plausible machine-image id; ConfigError with one line otherwise."""
    loaded = definitions(settings)
    for index, template in enumerate(settings.templates):
        problem = image_problem(settings, template, loaded)
        if problem:
            raise ConfigError(f"templates[{index}:{template.name}].image: {problem}")


def image_problem(
    settings: Settings, template: TemplateSettings, loaded: Mapping[str, LoadedImage]
) -> str | None:
    """Why the template's `image` is neither a usable definition nor a plausible raw
    machine-image id of its provider's type; None when it is one of them."""
    kind = kind_of(settings.provider(template.provider).type)
    value = template.image
    if not kind.boots_images:
        return None
    if value in loaded:
        if kind.type in loaded[value].definition.base:
            return None
        return (
            f"image {value!r} ({loaded[value].source}) has no [base.{kind.type}]: add one, "
            "or name a machine image"
        )
    near = difflib.get_close_matches(value, loaded, n=1, cutoff=CLOSE_MATCH)
    pattern = kind.image_id
    if not near and (pattern is None or re.match(pattern[0], value)):
        return None
    hint = f"did you mean {near[0]!r}? " if near else ""
    id_form = f"a machine-image id for {kind.type} ({pattern[1]})" if pattern else "an id"
    known = ", ".join(sorted(loaded)) or "none"
    return (
        f"{value!r} is neither an image definition in {images_dir(settings)} "
        f"(known: {known}) nor {id_form}: {hint}name one of them"
    )


def template_definitions(settings: Settings) -> dict[str, LoadedImage]:
    """The image definitions the templates name, by name, read with the configuration (at
    start and on every reload, never in a cycle): only `DIR/IMAGE.toml` of a template whose
    `image` has one, so a site whose templates all boot raw machine-image ids reads none.
    A definition that does not load is a ConfigError (one line naming the file and field)."""
    directory = images_dir(settings)
    loaded: dict[str, LoadedImage] = {}
    for template in settings.templates:
        value = template.image
        if value in loaded or not re.match(NAME_PATTERN, value):
            continue  # an id with "/" or ":" (Azure, gallery) is never a file name
        if not kind_of(settings.provider(template.provider).type).boots_images:
            continue
        path = directory / f"{value}.toml"
        if path.is_file():
            loaded[value] = load_image(path)
    return loaded


def region_images(
    session: Session, settings: Settings, loaded: Mapping[str, LoadedImage]
) -> dict[str, RegionImage]:
    """For every template naming one of the `loaded` definitions: its launch image and
    facts now (the cycle's read of copies, directors and revisions)."""
    return {
        t.name: _region_image(session, settings, t, loaded[t.image])
        for t in settings.templates
        if t.image in loaded
    }


def image_waits(images: Mapping[str, RegionImage]) -> dict[str, str]:
    """template -> `(Code:IMAGE) waiting for ...` for each template whose region has no
    usable machine image yet: clamp refuses its launches with it (no failed launch, no
    protection count), as it does a director's wait."""
    return {
        name: str(Reason(IMAGE, f"waiting for {found.problem}"))
        for name, found in images.items()
        if found.machine_image is None
    }


def _region_image(
    session: Session, settings: Settings, template: TemplateSettings, image: LoadedImage
) -> RegionImage:
    provider = settings.provider(template.provider)
    director = session.scalars(
        select(Director).filter_by(name=director_name(provider.name, provider.region))
    ).one_or_none()
    address = serving = ""
    if director is not None and _serving(director):
        serving = director.name
        address = usable_address(director.private_address, f"director {director.name}") or ""
    revision = served_revision(session, image.name, director)
    known = frozenset(session.scalars(select(Image.version).where(Image.name == image.name)))
    machine, problem, copy = _machine_image(session, settings, template, image)
    if machine is not None and not address and _needs_director(image):
        machine, problem = (
            None,
            (
                f"image {image.name}: it mounts from its region's director, and "
                f"{provider.name} ({provider.region}) has no director serving yet"
            ),
        )
    return RegionImage(image, machine, address, revision, problem, copy, serving, known)


def _serving(director: Director) -> bool:
    try:
        return DirectorState(director.state) in SERVING
    except ValueError:
        return False


def _needs_director(image: LoadedImage) -> bool:
    return any(m.server == "director" for m in image.definition.nfs_mounts)


def served_revision(session: Session, image: str, director: Director | None) -> str:
    """The newest revision of `image` verified on `director`; "" when none is."""
    if director is None:
        return ""
    query = (
        select(Image.version)
        .join(ImageReplica, ImageReplica.image_id == Image.id)
        .where(Image.name == image, ImageReplica.director_id == director.id)
        .where(ImageReplica.state == "verified")
        .order_by(Image.id.desc())
        .limit(1)
    )
    return session.scalars(query).first() or ""


def _machine_image(
    session: Session, settings: Settings, template: TemplateSettings, image: LoadedImage
) -> tuple[str | None, str, bool]:
    """(machine image or None, why not, whether cm-scale should start or follow its copy)."""
    provider = settings.provider(template.provider)
    base = image.definition.base.get(provider.type)
    if base is None:
        return None, f"image {image.name}: it has no [base.{provider.type}]", False
    if provider.name not in {p.name for p in regions_in_use(settings, provider.type)}:
        return base.image, "", False  # a type that copies nothing: the base image, as named
    if base.region is None or base.region == provider.region:
        return base.image, "", False
    row = session.scalars(
        select(MachineImage).filter_by(
            image_name=image.name, provider_name=provider.name, region=provider.region
        )
    ).one_or_none()
    if row is not None and row.state == "available" and row.source_image == base.image:
        return row.image_id, "", False
    where = f"image {image.name} in {provider.region}: {base.image}"
    if row is None or row.source_image != base.image:
        return None, f"{where} is not copied there yet (cm-scale starts the copy)", True
    if row.state == "pending":
        return None, f"{where} is being copied ({row.image_id or 'requested'})", True
    why = f": {row.error}" if row.error else ""
    return None, f"{where}: its copy {row.state}{why}; clustermgr images sync retries it", False


def launch_image(found: RegionImage) -> str:
    """The machine image to boot; ImageUnavailable when the region has none yet."""
    if found.machine_image is None:
        raise ImageUnavailable(found.problem)
    return found.machine_image


def launch_user_data(
    settings: Settings,
    found: RegionImage,
    provider_type: str,
    controller_version: str,
    key: KeyFetch | None,
) -> str:
    """The image's user-data for this launch: the region's facts and the request's token."""
    boot = bootstrap_facts(settings, provider_type, controller_version)
    if key is not None:
        boot = boot.with_key(key)
    facts = ClusterFacts(boot, found.director_address, found.revision, directory_facts(settings))
    return render(found.image, facts)

"""What cmsub checks before anything is submitted, each failure one line (exit 2):
SRC readable by the submitting user (os.access: cmsub runs as that user, never as root on
their behalf), DEST inside the staging area, symlinks that would lead out of it, the
estimated input size against the user's quota.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from clustermgr.core.errors import StagingError, UsageError
from clustermgr.staging.spec import StageItem

META_DIR = ".cmsub"  # the manifests inside a staging area


@dataclass(frozen=True)
class StageIn:
    """A checked stage-in: an absolute on-prem source, a relative path in the area."""

    source: Path
    dest: str
    is_dir: bool


@dataclass(frozen=True)
class StageOut:
    """A checked stage-out: a relative path in the area, and the absolute on-prem directory
    its results go into (a directory SRC's contents, a file SRC by its name): a fresh
    `dest/<jobid>/`, or `dest` itself with `overwrite` (staging/landing.py)."""

    source: str
    dest: Path
    overwrite: bool = False


@dataclass(frozen=True)
class Estimate:
    bytes_total: int
    files_total: int


def area_path(rel: str, what: str) -> str:
    """A path inside the staging area: relative, no '..', normalised ('a//b/./c' -> 'a/b/c')."""
    if not rel:
        raise UsageError(f"{what}: the path in the staging area is empty")
    if "\0" in rel:
        raise UsageError(f"{what}: the path holds a NUL byte")
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise UsageError(f"{what}: {rel!r} is absolute; give a path relative to the staging area")
    if ".." in pure.parts:
        raise UsageError(f"{what}: {rel!r} leaves the staging area ('..')")
    parts = [p for p in pure.parts if p != "."]
    if not parts:
        raise UsageError(f"{what}: {rel!r} names the staging area itself; name a path in it")
    if parts[0] == META_DIR:
        raise UsageError(f"{what}: {rel!r}: {META_DIR}/ is cmsub's own (manifests)")
    return "/".join(parts)


def _escapes(link: Path, tree: Path) -> bool:
    """A symlink in `tree` whose target (resolved) is outside `tree`."""
    target = os.readlink(link)
    if os.path.isabs(target):
        return True
    resolved = os.path.normpath(os.path.join(os.path.dirname(link), target))
    return os.path.commonpath([resolved, str(tree)]) != str(tree)


def _unsearchable_parent(path: Path) -> Path | None:
    """The first existing directory above `path` the user may not enter, if any."""
    for parent in reversed(path.parents):
        if parent.is_dir() and not os.access(parent, os.X_OK):
            return parent
    return None


def check_stage_in(item: StageItem, cwd: Path) -> StageIn:
    what = item.describe("in")
    source = Path(os.path.abspath(cwd / item.source))
    if not os.path.lexists(source):
        blocked = _unsearchable_parent(source)
        if blocked is not None:  # it may well exist: the user cannot look
            raise UsageError(
                f"cmsub: {what}: you cannot read {str(source)!r} "
                f"(no permission to enter {str(blocked)!r})"
            )
        raise UsageError(f"cmsub: {what}: SRC {str(source)!r} does not exist")
    source = source.resolve() if source.is_symlink() else source  # SRC itself may be a link
    if not source.exists():
        raise UsageError(f"cmsub: {what}: SRC {str(source)!r} is a dangling symlink")
    is_dir = source.is_dir()
    if not os.access(source, os.R_OK | (os.X_OK if is_dir else 0)):
        raise UsageError(f"cmsub: {what}: you cannot read {str(source)!r} (permission denied)")
    dest = area_path(item.dest or source.name, f"cmsub: {what}: DEST")
    return StageIn(source, dest, is_dir)


def check_stage_out(item: StageItem, cwd: Path, *, overwrite: bool = False) -> StageOut:
    """DEST is a directory (made at stage-out if missing, in an existing one): an existing
    file there would be overwritten, so it is refused, naming it."""
    what = item.describe("out")
    source = area_path(item.source, f"cmsub: {what}: SRC")
    dest = Path(os.path.abspath(cwd / (item.dest or PurePosixPath(source).name)))
    if os.path.lexists(dest) and not dest.is_dir():
        raise UsageError(
            f"cmsub: {what}: DEST {str(dest)!r} is an existing file; DEST is the directory "
            "the results go into (DEST/<jobid>/): name a directory"
        )
    parent = dest if dest.is_dir() else dest.parent
    if not parent.is_dir():
        raise UsageError(f"cmsub: {what}: DEST directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cmsub: {what}: you cannot write to {str(parent)!r} (permission denied)")
    return StageOut(source, dest, overwrite)


def estimate(stage_in: list[StageIn]) -> Estimate:
    """Bytes and files to stage in; every file must be readable by this user and every
    symlink must stay inside its tree (one line naming the first that is not)."""
    total = files = 0
    for item in stage_in:
        if not item.is_dir:
            total += item.source.stat().st_size
            files += 1
            continue
        for root, dirs, names in os.walk(item.source):
            for name in (*names, *dirs):
                path = Path(root) / name
                info = path.lstat()
                if stat.S_ISLNK(info.st_mode):
                    if _escapes(path, item.source):
                        raise UsageError(
                            f"cmsub: --stage-in {str(item.source)!r}: symlink {str(path)!r} "
                            "points outside the tree (it would escape the staging area)"
                        )
                elif stat.S_ISDIR(info.st_mode):
                    if not os.access(path, os.R_OK | os.X_OK):
                        raise UsageError(
                            f"cmsub: --stage-in: you cannot read directory {str(path)!r}"
                        )
                elif stat.S_ISREG(info.st_mode):
                    if not os.access(path, os.R_OK):
                        raise UsageError(f"cmsub: --stage-in: you cannot read {str(path)!r}")
                    total += info.st_size
                    files += 1
    return Estimate(total, files)


def check_links(stage_in: list[StageIn]) -> None:
    """At transfer time, again: no symlink in a tree leads out of it (one made after the
    submission); a StagingError names the first."""
    for item in stage_in:
        if not item.is_dir:
            continue
        for root, dirs, names in os.walk(item.source):
            for name in (*names, *dirs):
                path = Path(root) / name
                if path.is_symlink() and _escapes(path, item.source):
                    raise StagingError(
                        f"--stage-in {str(item.source)!r}: symlink {str(path)!r} points outside "
                        "the tree (made after submission?): refused"
                    )


def check_quota(user: str, held: int, wanted: int, quota: int) -> None:
    if held + wanted > quota:
        raise UsageError(
            f"cmsub: staging {wanted:,} bytes would put {user} at {held + wanted:,} of a "
            f"{quota:,}-byte quota ({held:,} held by earlier jobs): stage less or wait for "
            "their stage-out"
        )


def inside(area: Path, rel: str) -> Path:
    """`area/rel` at transfer time, refused when an existing component on the way is a
    symlink (it could point out of the area)."""
    path = area
    for part in PurePosixPath(rel).parts:
        path = path / part
        if path.is_symlink():
            raise StagingError(
                f"staging area {area}: {rel!r} goes through symlink {path}: refused "
                "(it could lead out of the staging area)"
            )
    return path

"""Where a stage-out's results land on-prem, so that none is lost (docs/staging.md).

Every DEST is a directory. The transport writes beside the target, into the hidden
`DEST/.cmsub-<jobid>.tmp/` (a re-run of the stage-out resumes there), and only a verified
transfer is moved into place:

- by default into a fresh `DEST/<jobid>/` (one rename: all of it appears at once); one
  that exists already is refused before a byte is sent;
- with `--overwrite`, into DEST itself, file by file with rename: a file it held before is
  either the old one or the new one, never half-written; files only DEST holds are left
  alone (nothing here reads or depends on them); a file where a directory goes (or the
  reverse) is refused before anything is moved;
- a failed job's results (the stage-out runs after any end of the job) go into
  `DEST/<jobid>.partial/`, whatever `--overwrite` says: they never replace results.

All of it runs as the user, in the transfer job, with the user's own rights.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from clustermgr.core.errors import StagingError
from clustermgr.staging.checks import StageOut

Moved = TypeVar("Moved")
PARTIAL_SUFFIX = ".partial"


@dataclass(frozen=True)
class Landing:
    """One DEST of a stage-out: where the transport writes, and where its files end."""

    dest: Path  # the directory the user named
    temp: Path  # DEST/.cmsub-<jobid>.tmp: the transport's destination
    final: Path | None  # DEST/<jobid> or DEST/<jobid>.partial; None: into DEST (--overwrite)


def temp_name(key: str) -> str:
    return f".cmsub-{key}.tmp"


def plan(items: list[StageOut], key: str, *, partial: bool) -> list[Landing]:
    """The landings of `items` (one per DEST), checked: a conflict is one line before any
    byte is written. `key` is the job id (the stage id when the chain has none)."""
    if not key or "/" in key or key.startswith("."):
        raise StagingError(f"stage-out: {key!r} cannot name a results directory")
    landings: dict[Path, Landing] = {}
    for item in items:
        if item.dest in landings:
            continue
        into_dest = item.overwrite and not partial
        final = None if into_dest else item.dest / (key + (PARTIAL_SUFFIX if partial else ""))
        landings[item.dest] = Landing(item.dest, item.dest / temp_name(key), final)
    for landing in landings.values():
        if os.path.lexists(landing.dest) and not landing.dest.is_dir():
            raise StagingError(
                f"stage-out: DEST {str(landing.dest)!r} is not a directory: nothing written"
            )
        if landing.final is not None and os.path.lexists(landing.final):
            raise StagingError(
                f"stage-out: {str(landing.final)!r} exists already: nothing written "
                "(results never replace a directory that is there)"
            )
    return list(landings.values())


def land(
    items: list[StageOut],
    key: str,
    move: Callable[[list[StageOut]], Moved],
    *,
    partial: bool = False,
) -> tuple[Moved, list[Path]]:
    """Stage `items` out through `move` (the transport, given the same items aimed at the
    hidden temporary directories), then put the results in place. What `move` returned,
    and where the results are."""
    landings = plan(items, key, partial=partial)
    by_dest = {landing.dest: landing for landing in landings}
    for landing in landings:
        landing.temp.mkdir(parents=True, exist_ok=True)
    try:
        moved = move([StageOut(i.source, by_dest[i.dest].temp, i.overwrite) for i in items])
    except BaseException:
        for landing in landings:  # an empty one only: a re-run resumes from what arrived
            with contextlib.suppress(OSError):
                landing.temp.rmdir()
        raise
    for landing in landings:  # every conflict before anything is moved into place
        if landing.final is None:
            _merge_conflict(landing.temp, landing.dest)
        elif os.path.lexists(landing.final):
            raise StagingError(
                f"stage-out: {str(landing.final)!r} appeared during the transfer: the results "
                f"stay in {str(landing.temp)!r}"
            )
    placed = []
    for landing in landings:
        if landing.final is None:
            _merge(landing.temp, landing.dest)
            shutil.rmtree(landing.temp)
            placed.append(landing.dest)
        else:
            os.rename(landing.temp, landing.final)
            placed.append(landing.final)
    return moved, placed


def _walk(temp: Path) -> list[tuple[str, bool]]:
    """(path relative to `temp`, is a directory) of everything in it, parents first."""
    found: list[tuple[str, bool]] = []
    for root, dirs, names in os.walk(temp):
        rel_root = os.path.relpath(root, temp)
        prefix = "" if rel_root == "." else rel_root + "/"
        for name in sorted(dirs):
            if (Path(root) / name).is_symlink():
                found.append((prefix + name, False))  # moved as the link it is
            else:
                found.append((prefix + name, True))
        found.extend((prefix + name, False) for name in sorted(names))
    return found


def _merge_conflict(temp: Path, dest: Path) -> None:
    for rel, is_dir in _walk(temp):
        there = dest / rel
        if not os.path.lexists(there):
            continue
        if is_dir and not there.is_dir():
            raise StagingError(
                f"stage-out: {str(there)!r} is a file where the results have a directory: "
                f"nothing moved into {str(dest)!r} (the results stay in {str(temp)!r})"
            )
        if not is_dir and there.is_dir() and not there.is_symlink():
            raise StagingError(
                f"stage-out: {str(there)!r} is a directory where the results have a file: "
                f"nothing moved into {str(dest)!r} (the results stay in {str(temp)!r})"
            )


def _merge(temp: Path, dest: Path) -> None:
    """Each file of `temp` into `dest` by rename (atomic: old or new, never half-written)."""
    for rel, is_dir in _walk(temp):
        if is_dir:
            (dest / rel).mkdir(exist_ok=True)
        else:
            os.replace(temp / rel, dest / rel)

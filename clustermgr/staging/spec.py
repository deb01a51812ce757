"""cmsub's command line and `#CMSUB` directives, parsed into a typed `StagingSpec`.

Everything that is not a cmsub option, up to the script, is an sbatch option and passes
through untouched; every word after the script is the script's (sbatch's rule). `#CMSUB`
lines count only in the script's leading comment block, as `#SBATCH` lines do; their words
are split like a POSIX shell would (quotes keep spaces) but nothing is ever run through a
shell. An option given on the command line replaces the same option's `#CMSUB` lines, as
sbatch's command line overrides `#SBATCH` lines.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from clustermgr.core.errors import UsageError

Transport = Literal["rsync", "s3"]
TRANSPORTS: tuple[Transport, ...] = ("rsync", "s3")

# sbatch's short options that take a value (`-p cloud` or `-pcloud`)
SHORT_WITH_VALUE = frozenset("AaBbCcDdeFGiJLMmNnopqSTtwx")
# sbatch's long options that take no value (anything else without `=` takes the next word)
LONG_FLAGS = frozenset(
    {
        "--contiguous",
        "--exclusive",
        "--get-user-env",
        "--hold",
        "--ignore-pbs",
        "--no-kill",
        "--no-requeue",
        "--nice",
        "--overcommit",
        "--oversubscribe",
        "--parsable",
        "--quiet",
        "--requeue",
        "--spread-job",
        "--test-only",
        "--use-min-nodes",
        "--verbose",
        "--wait",
        "--export-file",
    }
)
# sbatch options cmsub sets itself: the chain depends on them
RESERVED = {
    "-p": "--partition",
    "--partition": "--partition",
    "-d": "--dependency",
    "--dependency": "--dependency",
    "-C": "--constraint",
    "--constraint": "--constraint",
    "--wrap": "--wrap",
}


@dataclass(frozen=True)
class StageItem:
    """One `--stage-in`/`--stage-out` as written: SRC and DEST (DEST may be empty)."""

    source: str
    dest: str
    origin: str  # "command line" or "job.sh:3"

    def describe(self, direction: str) -> str:
        joined = f"{self.source}:{self.dest}" if self.dest else self.source
        return f"{self.origin}: --stage-{direction} {joined!r}"


@dataclass(frozen=True)
class StagingSpec:
    stage_in: tuple[StageItem, ...]
    stage_out: tuple[StageItem, ...]
    transport: Transport | None  # None: the config's default
    region: str | None
    sbatch_args: tuple[str, ...]
    script: Path
    script_args: tuple[str, ...]
    as_json: bool = False
    dry_run: bool = False
    overwrite: bool = False  # --overwrite: stage-out into DEST itself, not DEST/<jobid>/
    warnings: tuple[str, ...] = ()  # for stderr: script arguments that look like ours


# what a script argument that looks like one of these most likely meant
CMSUB_OPTIONS = (
    "--stage-in",
    "--stage-out",
    "--transport",
    "--region",
    "--json",
    "--dry-run",
    "--overwrite",
    "--status",
)


@dataclass
class _Parsed:
    stage_in: list[StageItem] = field(default_factory=list)
    stage_out: list[StageItem] = field(default_factory=list)
    transport: Transport | None = None
    region: str | None = None
    as_json: bool = False
    dry_run: bool = False
    overwrite: bool = False
    sbatch_args: list[str] = field(default_factory=list)


def split_item(text: str, direction: str, origin: str) -> StageItem:
    """SRC[:DEST]. A stage-in SRC is an on-prem path that may hold ':' itself: the first
    split whose left side exists is taken, the whole text when it exists."""
    if not text:
        raise UsageError(f"cmsub: {origin}: --stage-{direction} needs SRC[:DEST]")
    if direction == "in":
        if os.path.lexists(text) or ":" not in text:
            return StageItem(text, "", origin)
        for index, char in enumerate(text):
            if char == ":" and os.path.lexists(text[:index]):
                return StageItem(text[:index], text[index + 1 :], origin)
        source, _, dest = text.rpartition(":")
        return StageItem(source, dest, origin)
    source, sep, dest = text.partition(":")
    return StageItem(source, dest if sep else "", origin)


def _take_value(argv: list[str], index: int, name: str) -> tuple[str, int]:
    word = argv[index]
    if word.startswith(name + "="):
        return word[len(name) + 1 :], index + 1
    if index + 1 >= len(argv):
        raise UsageError(f"cmsub: {name} needs a value")
    return argv[index + 1], index + 2


def _cmsub_option(argv: list[str], index: int, parsed: _Parsed, origin: str) -> int | None:
    """Consume one cmsub option at argv[index]; the next index, or None if not ours."""
    word = argv[index]
    name = word.split("=", 1)[0]
    if name in ("--stage-in", "--stage-out"):
        value, after = _take_value(argv, index, name)
        direction = name.removeprefix("--stage-")
        target = parsed.stage_in if direction == "in" else parsed.stage_out
        target.append(split_item(value, direction, origin))
        return after
    if name == "--transport":
        value, after = _take_value(argv, index, name)
        if value not in TRANSPORTS:
            raise UsageError(f"cmsub: {origin}: --transport {value!r}: use rsync or s3")
        parsed.transport = "rsync" if value == "rsync" else "s3"
        return after
    if name == "--region":
        parsed.region, after = _take_value(argv, index, name)
        return after
    if word == "--json":
        parsed.as_json = True
        return index + 1
    if word == "--dry-run":
        parsed.dry_run = True
        return index + 1
    if word == "--overwrite":
        parsed.overwrite = True
        return index + 1
    return None


def _sbatch_option(argv: list[str], index: int) -> int:
    """Skip one sbatch option (with its value); the next index."""
    word = argv[index]
    name = word.split("=", 1)[0]
    reserved = RESERVED.get(name) if word.startswith("--") else RESERVED.get(word[:2])
    if reserved:
        raise UsageError(
            f"cmsub: {reserved} is set by cmsub (the chain pins the job to the staged region)"
            "; leave it out or use --region"
        )
    if word.startswith("--"):
        if "=" in word or word in LONG_FLAGS:
            return index + 1
        return min(index + 2, len(argv))
    letter = word[1:2]
    if letter in SHORT_WITH_VALUE and len(word) == 2:
        return min(index + 2, len(argv))
    return index + 1


def parse_argv(argv: list[str]) -> StagingSpec:
    """`cmsub [sbatch options] [cmsub options] script [args]`, then the script's directives."""
    parsed = _Parsed()
    index = 0
    while index < len(argv) and argv[index].startswith("-") and argv[index] != "-":
        if argv[index] == "--":
            index += 1
            break
        after = _cmsub_option(argv, index, parsed, "command line")
        if after is None:
            after = _sbatch_option(argv, index)
            parsed.sbatch_args.extend(argv[index:after])
        index = after
    if index >= len(argv):
        raise UsageError("cmsub: no job script given: cmsub [sbatch options] script.sh [args]")
    script = Path(argv[index])
    directives = read_directives(script)
    scripted = _Parsed()
    for words, origin in directives:
        position = 0
        while position < len(words):
            after = _cmsub_option(words, position, scripted, origin)
            if after is None:
                raise UsageError(f"cmsub: {origin}: {words[position]!r} is not a cmsub option")
            position = after
    script_args = tuple(argv[index + 1 :])
    # the command line wins: a cmsub option given there replaces the script's lines for it
    return StagingSpec(
        stage_in=tuple(parsed.stage_in or scripted.stage_in),
        stage_out=tuple(parsed.stage_out or scripted.stage_out),
        transport=parsed.transport or scripted.transport,
        region=parsed.region or scripted.region,
        sbatch_args=tuple(parsed.sbatch_args),
        script=script,
        script_args=script_args,
        as_json=parsed.as_json,
        dry_run=parsed.dry_run,
        overwrite=parsed.overwrite or scripted.overwrite,
        warnings=tuple(_lookalikes(script, script_args)),
    )


def _lookalikes(script: Path, script_args: tuple[str, ...]) -> list[str]:
    """A warning per script argument that looks like a cmsub option: it goes to the
    script, cmsub does not act on it (a `--dry-run` after the script submits for real)."""
    found = []
    for word in script_args:
        if word.split("=", 1)[0] in CMSUB_OPTIONS:
            found.append(
                f"cmsub: warning: {word.split('=', 1)[0]} comes after the script {str(script)!r}: "
                "it is passed to the script, not acted on by cmsub (put it before the script)"
            )
    return found


def read_directives(script: Path) -> list[tuple[list[str], str]]:
    """The words of each `#CMSUB` line of the leading comment block, with file:line."""
    try:
        text = script.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise UsageError(f"cmsub: job script {str(script)!r} does not exist") from None
    except OSError as exc:
        raise UsageError(f"cmsub: job script {str(script)!r}: {exc.strerror}") from None
    found: list[tuple[list[str], str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break  # the first command ends the directive block, as for #SBATCH
        if stripped.startswith("#CMSUB"):
            origin = f"{script}:{number}"
            try:
                words = shlex.split(stripped[len("#CMSUB") :], comments=False, posix=True)
            except ValueError as exc:
                raise UsageError(f"cmsub: {origin}: {exc}") from None
            found.append((words, origin))
    return found

"""The rsync transport: argv only (never a shell), `-a --partial`, to a staging area that
is a directory on an rsync daemon (`rsync://director/module/...`, the region's director)
or a local directory (tests, or a mounted staging filesystem).

Verification: rsync checks every file it sends with a whole-file checksum of what the
receiver wrote. A file it did not send (its quick check found size and time equal: an
earlier, interrupted run, or a corrupted copy) is compared by content: sha256 of both
sides when both are local, rsync's checksum dry run (both ends read the file) against a
daemon. A file that differs is sent again (`--checksum`) and compared again. The manifest
of the run (`.cmsub/in.json` or `out.json` in the area) lists every verified file; a
re-run does not compare again a file whose size, time and sha256 are the manifest's.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from clustermgr.errors import StagingError
from clustermgr.staging import manifest, rsyncd_auth
from clustermgr.staging.checks import META_DIR, StageIn, StageOut, inside
from clustermgr.staging.manifest import FileEntry
from clustermgr.staging.progress import Progress

IO_TIMEOUT_S = 300
OUT_FORMAT = "%i %l %n"
_ESCAPE_BYTES = re.compile(rb"\\#([0-7]{3})")


@dataclass(frozen=True)
class Pair:
    """One item: rsync `src` to `dst`, and which side is the local one we can hash."""

    src: str  # a local path or an rsync URL; a directory ends in '/'
    dst: str
    area_rel: str  # the item's path in the staging area
    local: Path  # the local side (the source of a stage-in, the destination of a stage-out)
    is_dir: bool
    local_is_src: bool


@dataclass(frozen=True)
class Report:
    bytes_total: int
    files_total: int
    files_sent: int
    bytes_sent: int
    files_compared: int  # verified by content this run (not sent, not in the manifest)
    files_repaired: int
    seconds: float


def is_url(target: str) -> bool:
    return target.startswith("rsync://") or "::" in target


def area_of(root: str, user: str, stage_id: str) -> str:
    """`<root>/<user>/<stage_id>`, or `rsync://user@host:port/module/<stage_id>`."""
    return f"{rsyncd_auth.user_root(root, user)}/{stage_id}"


def _decode(name: str) -> str:
    """rsync prints an unprintable byte (a newline, UTF-8 under LC_ALL=C) as `\\#ooo`."""
    raw = name.encode("utf-8", "surrogateescape")
    raw = _ESCAPE_BYTES.sub(lambda m: bytes([int(m[1], 8)]), raw)
    return raw.decode("utf-8", "surrogateescape")


def _argv(*extra: str) -> list[str]:
    # --safe-links: a link leading out of the tree (made after the checks) is not copied
    return ["rsync", "-a", "--safe-links", "--partial", f"--timeout={IO_TIMEOUT_S}", *extra]


def _run(argv: list[str], stdin: bytes | None = None) -> str:
    done = subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    )
    if done.returncode != 0:
        lines = [x for x in done.stderr.decode("utf-8", "replace").splitlines() if x.strip()]
        detail = lines[0].strip() if lines else ""
        raise StagingError(f"rsync {argv[-2]} -> {argv[-1]} exited {done.returncode}: {detail}")
    return done.stdout.decode("utf-8", "surrogateescape")


def _items(output: str) -> Iterator[tuple[str, int, str]]:
    """(itemize code, size, name) of each --out-format line."""
    for line in output.split("\n"):
        code, _, rest = line.partition(" ")
        size, _, name = rest.partition(" ")
        if len(code) >= 11 and size.isdigit():
            yield code, int(size), _decode(name)


def _sent(output: str, pair: Pair) -> dict[str, int]:
    """Area paths of the regular files rsync transferred, with their sizes."""
    sent: dict[str, int] = {}
    for code, size, name in _items(output):
        if code[0] in "<>" and code[1] == "f":
            sent[_join(pair, name)] = size
    return sent


def _join(pair: Pair, name: str) -> str:
    return f"{pair.area_rel}/{name.rstrip('/')}" if pair.is_dir else pair.area_rel


_Local = tuple[str, Path, os.stat_result]


def _scan(pair: Pair) -> tuple[list[_Local], list[str]]:
    """The local side's files and their sha256, in the same order."""
    files = _local_files(pair)
    return files, manifest.hash_files([path for _rel, path, _info in files])


def _local_files(pair: Pair) -> list[tuple[str, Path, os.stat_result]]:
    """(area path, path, lstat) of the regular files on the local side of `pair`."""
    if not pair.is_dir:
        return [(pair.area_rel, pair.local, pair.local.stat())]
    found: list[tuple[str, Path, os.stat_result]] = []
    stack = [(str(pair.local), pair.area_rel)]
    while stack:
        folder, rel = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    stack.append((entry.path, f"{rel}/{entry.name}"))
                elif stat.S_ISREG(info.st_mode):
                    found.append((f"{rel}/{entry.name}", Path(entry.path), info))
    found.sort(key=lambda f: f[0])
    return found


def _copy(pair: Pair, progress: Progress, *, checksum: bool = False) -> dict[str, int]:
    flags = ["--mkpath", f"--out-format={OUT_FORMAT}"]
    if checksum:
        flags.append("--checksum")
    if is_url(pair.dst) or is_url(pair.src):
        flags.append("--contimeout=15")
    sent = _sent(_run([*_argv(*flags), pair.src, pair.dst]), pair)
    progress.advance(sum(sent.values()))
    return sent


def _differs_by_rsync(pair: Pair, rels: list[str]) -> list[str]:
    """Area paths (of `rels`, all in `pair`) whose content differs, by rsync's checksums."""
    if not rels:
        return []
    flags = ["--checksum", "--dry-run", f"--out-format={OUT_FORMAT}"]
    if is_url(pair.dst) or is_url(pair.src):
        flags.append("--contimeout=15")
    if not pair.is_dir:
        output = _run([*_argv(*flags), pair.src, pair.dst])
        return [pair.area_rel] if any(c[1] == "f" for c, _s, _n in _items(output)) else []
    prefix = pair.area_rel + "/"
    listing = b"\0".join(r.removeprefix(prefix).encode("utf-8", "surrogateescape") for r in rels)
    output = _run([*_argv(*flags, "--from0", "--files-from=-"), pair.src, pair.dst], listing)
    return [_join(pair, n) for c, _s, n in _items(output) if c[1] == "f"]


def _other_side(pair: Pair, rel: str) -> Path:
    """The non-local side of a file of a local-to-local pair."""
    other = Path((pair.dst if pair.local_is_src else pair.src).rstrip("/"))
    return other / rel.removeprefix(pair.area_rel + "/") if pair.is_dir else other


def _differs(pair: Pair, rels: list[str], hashes: dict[str, str]) -> list[str]:
    if is_url(pair.src) or is_url(pair.dst):
        return _differs_by_rsync(pair, rels)
    bad = []
    for rel in rels:
        other = _other_side(pair, rel)
        if not other.is_file() or manifest.sha256_of(other) != hashes[rel]:
            bad.append(rel)
    return bad


def transfer(
    pairs: list[Pair],
    read_previous: Callable[[], dict[str, FileEntry]],
    progress: Progress,
    *,
    hash_first: bool,
) -> tuple[list[FileEntry], Report]:
    """Copy and verify every pair; the verified manifest entries and the figures.
    `read_previous`: the last run's manifest, asked for once the first copy is done (it
    may be read meanwhile). `hash_first`: the local side is the source (hash it while
    rsync reads it too)."""
    start = time.monotonic()
    sent: dict[str, int] = {}
    entries: list[FileEntry] = []
    compared = repaired = 0
    with ThreadPoolExecutor(max_workers=1) as hasher:
        for pair in pairs:
            scan: Future[tuple[list[_Local], list[str]]] | None = None
            if hash_first:  # the source: walked and hashed while rsync reads it too
                scan = hasher.submit(_scan, pair)
            pair_sent = _copy(pair, progress)
            files, digests = (scan or hasher.submit(_scan, pair)).result()
            hashes = {rel: d for (rel, _p, _i), d in zip(files, digests, strict=True)}
            previous = read_previous()
            here = {
                rel: FileEntry(rel, info.st_size, info.st_mtime_ns, hashes[rel])
                for rel, _path, info in files
            }
            unchecked = [
                rel
                for rel, entry in here.items()
                if rel not in pair_sent and not (rel in previous and previous[rel].same_file(entry))
            ]
            compared += len(unchecked)
            bad = _differs(pair, unchecked, hashes)
            if bad:
                repaired += len(bad)
                progress.note(f"{len(bad)} file(s) differ at the destination: sending again")
                pair_sent.update(_copy(pair, progress, checksum=True))
                still = _differs(pair, bad, hashes)
                if still:
                    raise StagingError(
                        f"verification failed after a repair: {still[0]!r} differs at the "
                        "destination"
                    )
            sent.update(pair_sent)
            entries.extend(here.values())
    report = Report(
        bytes_total=sum(e.size for e in entries),
        files_total=len(entries),
        files_sent=len(sent),
        bytes_sent=sum(sent.values()),
        files_compared=compared,
        files_repaired=repaired,
        seconds=time.monotonic() - start,
    )
    return entries, report


def read_remote_manifest(area: str, direction: str) -> dict[str, FileEntry]:
    name = f"{META_DIR}/{direction}.json"
    if not is_url(area):
        path = Path(area) / name
        return manifest.decode(path.read_bytes()) if path.is_file() else {}
    with tempfile.TemporaryDirectory(prefix="cmsub-") as scratch:
        local = Path(scratch) / "m.json"
        done = subprocess.run(
            ["rsync", "--contimeout=15", f"{area}/{name}", str(local)],
            capture_output=True,
            check=False,
        )
        return manifest.decode(local.read_bytes()) if done.returncode == 0 else {}


def write_remote_manifest(area: str, direction: str, entries: list[FileEntry]) -> None:
    payload = manifest.encode(entries, direction)
    target = f"{area}/{META_DIR}/{direction}.json"
    with tempfile.TemporaryDirectory(prefix="cmsub-") as scratch:
        local = Path(scratch) / f"{direction}.json"
        local.write_bytes(payload)
        _run(["rsync", "--mkpath", "--timeout=60", str(local), target])


def remote_is_dir(url: str) -> bool:
    """Whether `url` (a path on the daemon or a local path) is a directory."""
    if not is_url(url):
        return Path(url).is_dir()
    listing = _run(["rsync", "--list-only", "--contimeout=15", url.rstrip("/")])
    return listing.startswith("d")


def stage_in_pairs(items: list[StageIn], area: str) -> list[Pair]:
    pairs = []
    for item in items:
        dst = f"{area}/{item.dest}"
        if not is_url(area):
            inside(Path(area), item.dest)
        src = f"{item.source}/" if item.is_dir else str(item.source)
        pairs.append(
            Pair(src, dst + ("/" if item.is_dir else ""), item.dest, item.source, item.is_dir, True)
        )
    return pairs


def stage_out_pairs(items: list[StageOut], area: str) -> list[Pair]:
    pairs = []
    for item in items:
        if not is_url(area):
            inside(Path(area), item.source)
        src = f"{area}/{item.source}"
        is_dir = remote_is_dir(src)
        pairs.append(
            Pair(
                src + ("/" if is_dir else ""),
                str(item.dest) + ("/" if is_dir else ""),
                item.source,
                item.dest,
                is_dir,
                False,
            )
        )
    return pairs


def remove_area(area: str) -> None:
    """Empty a finished job's staging area (an rsync with --delete from an empty directory
    for a daemon; a local area is removed)."""
    if not is_url(area):
        import shutil

        shutil.rmtree(area, ignore_errors=True)
        return
    with tempfile.TemporaryDirectory(prefix="cmsub-empty-") as empty:
        _run(["rsync", "-r", "--delete", "--contimeout=15", f"{empty}/", f"{area}/"])

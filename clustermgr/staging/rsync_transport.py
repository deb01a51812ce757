"""The rsync transport: argv only (never a shell), `-a --partial`, to a staging area that
is a directory on an rsync daemon (`rsync://director/module/...`, the region's director)
or a local directory (tests, or a mounted staging filesystem).

Verification: rsync checks every file it sends with a whole-file checksum (xxh128: asked
for with RSYNC_CHECKSUM_LIST, checked in what `--debug=NSTR` says the ends agreed on) of
what the receiver wrote, and prints it (`%C`); that digest is the file's in the manifest,
nothing is hashed beside rsync. A file it did not send (its
quick check found size and time equal: an earlier, interrupted run, or a corrupted copy)
is compared by content with rsync's checksum dry run (`--checksum --dry-run`: both ends
read the file), the manifest taking the digest both sides had. A file that differs is sent
again (`--ignore-times`) and compared again. The manifest of the run (`.cmsub/in.json` or
`out.json` in the area) lists every verified file; a re-run neither sends nor compares
again a file whose size, mtime and ctime are still the manifest's.
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

from clustermgr.core.errors import StagingError
from clustermgr.staging import manifest, rsyncd_auth
from clustermgr.staging.checks import META_DIR, StageIn, StageOut, inside
from clustermgr.staging.manifest import FileEntry, Previous
from clustermgr.staging.progress import Progress

IO_TIMEOUT_S = 300
ALGO = manifest.XXH128  # rsync's whole-file checksum, the manifest's digests
DIGEST_WIDTH = 32  # hex digits of an xxh128 (rsync prints as many spaces when it has none)
OUT_FORMAT = "%i %l %C %n"
CODE_WIDTH = 11  # rsync's itemize code (`%i`): `YXcstpoguax`
NEGOTIATED = "Client negotiated checksum: "
# a file whose ctime is later than this before the transfer began may have changed while
# rsync read it: its manifest entry is not trusted by a re-run (ctime ticks are ~4 ms)
CHANGING_NS = 20_000_000
# each connection to a daemon sets TCP_NODELAY: without it a small message can wait for the
# daemon's delayed ACK (40 ms); a manifest written in its own connection took 0.1 s, 0.007
# with it. (RSYNC_CHECKSUM_LIST rather than --checksum-choice for the same reason: the
# option made the daemon send a small message that waited 40 ms when it lacks TCP_NODELAY.)
DAEMON_FLAGS = ("--contimeout=15", "--sockopts=TCP_NODELAY")
_ESCAPE_BYTES = re.compile(rb"\\#([0-7]{3})")


@dataclass(frozen=True)
class Pair:
    """One item: rsync `src` to `dst`, and which side is the local one we stat."""

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


def _argv(pair: Pair, *extra: str) -> list[str]:
    # --safe-links: a link leading out of the tree (made after the checks) is not copied
    argv = ["rsync", "-a", "--safe-links", "--partial", f"--timeout={IO_TIMEOUT_S}"]
    argv += ["--debug=NSTR", f"--out-format={OUT_FORMAT}", *extra]
    if is_url(pair.src) or is_url(pair.dst):
        argv += DAEMON_FLAGS
    return argv


def _run(argv: list[str], stdin: bytes | None = None) -> str:
    """rsync's output; its lines go to a file, not a pipe: reading one line at a time as
    they come woke this process 5,000 times for 10,000 files, on the cores rsync needs."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        done = subprocess.run(
            argv,
            input=stdin,
            stdout=out,
            stderr=err,
            env={**os.environ, "LC_ALL": "C", "RSYNC_CHECKSUM_LIST": ALGO},
            check=False,
        )
        if done.returncode != 0:
            err.seek(0)
            lines = [x for x in err.read().decode("utf-8", "replace").splitlines() if x.strip()]
            detail = lines[0].strip() if lines else ""
            raise StagingError(f"rsync {argv[-2]} -> {argv[-1]} exited {done.returncode}: {detail}")
        out.seek(0)
        return out.read().decode("utf-8", "surrogateescape")


def _rsync(pair: Pair, flags: list[str], stdin: bytes | None = None) -> str:
    """rsync `pair` with `flags`: its itemized output, once it is sure the digests in it are
    xxh128 (RSYNC_CHECKSUM_LIST asks for it; `--debug=NSTR` says what the ends agreed on)."""
    output = _run([*_argv(pair, *flags), pair.src, pair.dst], stdin)
    if f"\n{NEGOTIATED}{ALGO}\n" not in f"\n{output}":  # a file's line starts with its code
        raise StagingError(
            f"rsync {pair.src} -> {pair.dst}: the two ends did not agree on {ALGO} checksums "
            "(both need rsync 3.2.3 or later built with xxHash)"
        )
    return output


def _files(output: str, pair: Pair) -> Iterator[tuple[str, str, int, str]]:
    """(itemize code, area path, size, digest) of each regular file in --out-format lines
    (`%i %l %C %n`; the digest is '' where rsync printed none)."""
    for line in output.split("\n"):
        code = line[:CODE_WIDTH]
        size, _, rest = line[CODE_WIDTH + 1 :].partition(" ")
        if code[1:2] != "f" or not size.isdigit() or len(rest) <= DIGEST_WIDTH + 1:
            continue
        digest, name = rest[:DIGEST_WIDTH].strip(), rest[DIGEST_WIDTH + 1 :]
        name = _decode(name) if "\\#" in name else name
        yield code, _join(pair, name), int(size), digest


def _sent(output: str, pair: Pair) -> dict[str, tuple[int, str]]:
    """Area paths of the regular files rsync transferred: their sizes and digests."""
    sent = {}
    for code, rel, size, digest in _files(output, pair):
        if code[0] in "<>":
            if not digest:
                raise StagingError(f"rsync printed no {ALGO} checksum for {rel!r}")
            sent[rel] = (size, digest)
    return sent


def _entry(rel: str, info: os.stat_result, digest: str, *, untrusted: bool = False) -> FileEntry:
    ctime_ns = 0 if untrusted else info.st_ctime_ns
    return FileEntry(rel, info.st_size, info.st_mtime_ns, digest, ctime_ns)


def _join(pair: Pair, name: str) -> str:
    return f"{pair.area_rel}/{name.rstrip('/')}" if pair.is_dir else pair.area_rel


def _local_files(pair: Pair) -> list[tuple[str, os.stat_result]]:
    """(area path, lstat) of the regular files on the local side of `pair`."""
    if not pair.is_dir:
        return [(pair.area_rel, pair.local.stat())]
    found: list[tuple[str, os.stat_result]] = []
    stack = [(str(pair.local), pair.area_rel)]
    while stack:
        folder, rel = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    stack.append((entry.path, f"{rel}/{entry.name}"))
                elif stat.S_ISREG(info.st_mode):
                    found.append((f"{rel}/{entry.name}", info))
    found.sort(key=lambda f: f[0])
    return found


def _listing(pair: Pair, rels: list[str]) -> tuple[list[str], bytes | None]:
    """rsync flags and stdin to act on just `rels` of `pair`."""
    if not pair.is_dir:
        return [], None
    prefix = pair.area_rel + "/"
    names = b"\0".join(r.removeprefix(prefix).encode("utf-8", "surrogateescape") for r in rels)
    return ["--from0", "--files-from=-"], names


def _copy(
    pair: Pair, progress: Progress, rels: list[str] | None = None
) -> dict[str, tuple[int, str]]:
    """rsync the pair (or, again and whatever their size and time, just `rels`)."""
    flags, stdin = (["--mkpath"], None) if rels is None else _listing(pair, rels)
    if rels is not None:
        flags.append("--ignore-times")
    sent = _sent(_rsync(pair, flags, stdin), pair)
    progress.advance(sum(size for size, _digest in sent.values()))
    return sent


def _compare(pair: Pair, rels: list[str]) -> tuple[dict[str, str], list[str]]:
    """rsync's checksum dry run over `rels` (all in `pair`): the digests of the files both
    sides hold the same, and the area paths of those that differ (or are missing)."""
    if not rels:
        return {}, []
    flags, stdin = _listing(pair, rels)
    output = _rsync(pair, ["--checksum", "--dry-run", "-ii", *flags], stdin)
    same = {
        rel: digest for code, rel, _s, digest in _files(output, pair) if code[0] == "." and digest
    }
    return same, [rel for rel in rels if rel not in same]  # differs, missing, or not listed


def _verified(pair: Pair, rels: list[str], progress: Progress) -> tuple[dict[str, str], list[str]]:
    """Compare `rels` by content; send those that differ again and compare them again (a
    second mismatch fails). The digests of all, and the paths that were repaired."""
    same, bad = _compare(pair, rels)
    if not bad:
        return same, []
    progress.note(f"{len(bad)} file(s) differ at the destination: sending again")
    _copy(pair, progress, bad)
    fixed, still = _compare(pair, bad)
    if still:
        raise StagingError(
            f"verification failed after a repair: {still[0]!r} differs at the destination"
        )
    return {**same, **fixed}, bad


def transfer(
    pairs: list[Pair],
    read_previous: Callable[[], Previous],
    progress: Progress,
) -> tuple[list[FileEntry], Report]:
    """Copy and verify every pair; the verified manifest entries and the figures.
    `read_previous`: the last run's manifest, asked for once the first copy is done (it
    may be read meanwhile)."""
    start = time.monotonic()
    changing = time.time_ns() - CHANGING_NS
    sent: dict[str, tuple[int, str]] = {}
    entries: list[FileEntry] = []
    compared = repaired = 0
    refusal_noted = False
    with ThreadPoolExecutor(max_workers=1) as walker:
        for pair in pairs:
            walk: Future[list[tuple[str, os.stat_result]]] | None = None
            if pair.local_is_src:  # the source: walked while rsync reads it too
                walk = walker.submit(_local_files, pair)
            pair_sent = _copy(pair, progress)
            files = walk.result() if walk is not None else _local_files(pair)
            previous = read_previous()
            if previous.refused and not refusal_noted:
                progress.note(f"the last manifest is not used ({previous.refused}): compared again")
                refusal_noted = True
            trusted: dict[str, str] = {}
            unchecked: list[str] = []
            for rel, info in files:
                old = previous.entries.get(rel)
                if rel in pair_sent:
                    continue
                if old is not None and old.unchanged(_entry(rel, info, old.digest)):
                    trusted[rel] = old.digest
                else:
                    unchecked.append(rel)
            compared += len(unchecked)
            digests, bad = _verified(pair, unchecked, progress)
            repaired += len(bad)
            digests.update(trusted)
            digests.update((rel, digest) for rel, (_size, digest) in pair_sent.items())
            for rel, info in files:
                racing = pair.local_is_src and info.st_ctime_ns >= changing
                entries.append(_entry(rel, info, digests[rel], untrusted=racing))
            sent.update(pair_sent)
    report = Report(
        bytes_total=sum(e.size for e in entries),
        files_total=len(entries),
        files_sent=len(sent),
        bytes_sent=sum(size for size, _digest in sent.values()),
        files_compared=compared,
        files_repaired=repaired,
        seconds=time.monotonic() - start,
    )
    return entries, report


def read_remote_manifest(area: str, direction: str) -> Previous:
    """The last run's manifest in the area (none when there is none to read)."""
    name = f"{META_DIR}/{direction}.json"
    if not is_url(area):
        path = Path(area) / name
        return manifest.decode(path.read_bytes(), ALGO) if path.is_file() else Previous({})
    with tempfile.TemporaryDirectory(prefix="cmsub-") as scratch:
        local = Path(scratch) / "m.json"
        done = subprocess.run(
            ["rsync", *DAEMON_FLAGS, f"{area}/{name}", str(local)],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            return Previous({})
        return manifest.decode(local.read_bytes(), ALGO)


def write_remote_manifest(area: str, direction: str, entries: list[FileEntry]) -> None:
    payload = manifest.encode(entries, direction, ALGO)
    target = f"{area}/{META_DIR}/{direction}.json"
    with tempfile.TemporaryDirectory(prefix="cmsub-") as scratch:
        local = Path(scratch) / f"{direction}.json"
        local.write_bytes(payload)
        flags = DAEMON_FLAGS if is_url(area) else ()
        _run(["rsync", "--mkpath", "--timeout=60", *flags, str(local), target])


def remote_is_dir(url: str) -> bool:
    """Whether `url` (a path on the daemon or a local path) is a directory."""
    if not is_url(url):
        return Path(url).is_dir()
    listing = _run(["rsync", "--list-only", *DAEMON_FLAGS, url.rstrip("/")])
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
    """Each item's DEST is a directory: a directory SRC's contents go into it, a file SRC
    by its name."""
    pairs = []
    for item in items:
        if not is_url(area):
            inside(Path(area), item.source)
        src = f"{area}/{item.source}"
        is_dir = remote_is_dir(src)
        local = item.dest if is_dir else item.dest / Path(item.source).name
        pairs.append(
            Pair(src + ("/" if is_dir else ""), f"{item.dest}/", item.source, local, is_dir, False)
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
        _run(["rsync", "-r", "--delete", *DAEMON_FLAGS, f"{empty}/", f"{area}/"])

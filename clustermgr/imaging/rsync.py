"""rsync, run as an argv (never through a shell): the transfer, its --stats, its progress,
and the checksum dry run that verifies a copy behind an rsync daemon.

Flags, and why:
  -a -H -A -X   everything an image tree holds: perms, times, symlinks, hard links, ACLs,
                xattrs (-A/-X can be turned off for a director filesystem without them)
  --delete      the copy holds nothing the head's tree does not
  --partial-dir=.rsync-partial
                an interrupted transfer resumes from what it had sent, kept out of the
                served tree. Not --inplace: rsync then writes into the live file, so a node
                reading the image during a sync could see a torn file; the default (a
                temporary file renamed into place) replaces each file atomically
  --numeric-ids the director has no passwd entries of the head's users
  --modify-window=-1
                the quick check compares times to the nanosecond: by default it compares
                whole seconds, and a same-size file changed within the second of its last
                sync would be skipped (verification would then find the copy corrupt)
  --no-inc-recursive
                the whole file list first: progress knows its total, hard links are
                matched across the whole tree
  --stats, --no-human-readable   plain numbers to parse
  --checksum    only on a repair sync: a corrupted file keeps its size and time, which
                rsync's quick check would trust
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clustermgr.core.secret import Secret

PARTIAL_DIR = ".rsync-partial"
PASSWORD_ENV = "RSYNC_PASSWORD"  # noqa: S105 (the variable's name, not a password)
IO_TIMEOUT_S = 120  # rsync --timeout: no data moving for this long ends the run
CONNECT_TIMEOUT_S = 15  # rsync --contimeout, for a daemon target

EXIT_MEANINGS = {
    1: "syntax or usage error",
    2: "protocol incompatibility",
    3: "errors selecting input/output files, dirs",
    5: "error starting client-server protocol",
    10: "error in socket I/O",
    11: "error in file I/O",
    12: "error in rsync protocol data stream",
    20: "interrupted",
    23: "partial transfer due to error",
    24: "partial transfer: some source files vanished",
    30: "timeout in data send/receive",
    35: "timeout waiting for daemon connection",
}
_PROGRESS = re.compile(rb"^\s*(\d+)\s+(\d+)%")
_STAT_LINES = {
    "Total bytes sent": "bytes_sent",
    "Total bytes received": "bytes_received",
    "Number of regular files transferred": "files_sent",
    "Total file size": "total_size",
    "Literal data": "literal_bytes",
    "Matched data": "matched_bytes",
}
_ITEM = re.compile(r"^(\*deleting|[<>ch.*][fdLDS][cstpoguax.+ ?]{7,9})\s+(.*)$")


@dataclass(frozen=True)
class RsyncOptions:
    acls: bool = True
    xattrs: bool = True
    timeout_s: float = 3600.0  # the whole run
    # a daemon target's password (the director's push module): rsync reads RSYNC_PASSWORD,
    # so it is in no argv; a Secret, so no repr of the options shows it
    password: Secret | None = None


@dataclass(frozen=True)
class TransferStats:
    bytes_sent: int
    bytes_received: int
    files_sent: int
    total_size: int
    literal_bytes: int
    matched_bytes: int
    seconds: float


class RsyncFailed(Exception):
    """rsync exited non-zero; the message is one line."""


def is_daemon_url(target: str) -> bool:
    return target.startswith("rsync://") or "::" in target


def base_flags(options: RsyncOptions) -> list[str]:
    flags = "-aH" + ("A" if options.acls else "") + ("X" if options.xattrs else "")
    return [
        flags,
        "--numeric-ids",
        "--delete",
        f"--partial-dir={PARTIAL_DIR}",
        "--modify-window=-1",
    ]


def transfer_argv(
    source: Path, dest: str, options: RsyncOptions, *, checksum: bool, progress: bool
) -> list[str]:
    argv = ["rsync", *base_flags(options), "--no-inc-recursive", "--stats", "--no-human-readable"]
    argv.append(f"--timeout={IO_TIMEOUT_S}")
    if is_daemon_url(dest):
        argv.append(f"--contimeout={CONNECT_TIMEOUT_S}")
    if checksum:
        argv.append("--checksum")
    if progress:
        argv.append("--info=progress2")
    return [*argv, f"{source}/", dest]


def verify_argv(source: Path, dest: str, options: RsyncOptions) -> list[str]:
    """A checksum dry run: every file read on both ends, each difference itemized."""
    argv = ["rsync", *base_flags(options), "--checksum", "--dry-run", "--itemize-changes"]
    argv.append(f"--timeout={IO_TIMEOUT_S}")
    if is_daemon_url(dest):
        argv.append(f"--contimeout={CONNECT_TIMEOUT_S}")
    return [*argv, f"{source}/", dest]


def _env(options: RsyncOptions) -> dict[str, str]:
    env = {**os.environ, "LC_ALL": "C"}
    env.pop(PASSWORD_ENV, None)
    if options.password is not None:
        env[PASSWORD_ENV] = options.password.reveal()
    return env


def _failure(argv: list[str], code: int, stderr: str) -> RsyncFailed:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    detail = next((line for line in lines if not line.startswith("rsync error:")), "")
    meaning = EXIT_MEANINGS.get(code, "failed")
    where = argv[-1]
    return RsyncFailed(
        f"rsync to {where} exited {code} ({meaning})" + (f": {detail}" if detail else "")
    )


def transfer(
    source: Path,
    dest: str,
    options: RsyncOptions,
    *,
    checksum: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> TransferStats:
    """Run one transfer; `on_progress(bytes done, percent)` as rsync reports it."""
    argv = transfer_argv(source, dest, options, checksum=checksum, progress=on_progress is not None)
    start = time.monotonic()
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, env=_env(options))
        assert proc.stdout is not None
        try:
            output = _read_output(proc, start + options.timeout_s, on_progress)
            code = proc.wait(timeout=max(1.0, start + options.timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RsyncFailed(
                f"rsync to {dest} took longer than {options.timeout_s:.0f} s: stopped"
            ) from None
        finally:
            proc.stdout.close()
        errors.seek(0)
        stderr = errors.read().decode("utf-8", "replace")
    if code not in (0, 24):  # 24: a file vanished on the head mid-run; verification decides
        raise _failure(argv, code, stderr)
    return parse_stats(output.decode("utf-8", "replace"), time.monotonic() - start)


def _read_output(
    proc: subprocess.Popen[bytes], deadline: float, on_progress: Callable[[int, int], None] | None
) -> bytearray:
    assert proc.stdout is not None
    output = bytearray()
    pending = b""
    while True:
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        output += chunk
        if on_progress is not None:
            pending += chunk
            *lines, pending = re.split(rb"[\r\n]", pending)
            for line in lines:
                found = _PROGRESS.match(line)
                if found:
                    on_progress(int(found[1]), int(found[2]))
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, 0)
    return output


def parse_stats(text: str, seconds: float) -> TransferStats:
    """The figures of rsync --stats (with --no-human-readable: plain integers)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        label, sep, rest = line.partition(":")
        key = _STAT_LINES.get(label.strip())
        if sep and key:
            number = re.match(r"\s*([\d,]+)", rest)
            if number:
                found[key] = int(number[1].replace(",", ""))
    if "bytes_sent" not in found:
        raise RsyncFailed("rsync printed no --stats (is it rsync 3.1 or newer?)")
    return TransferStats(
        bytes_sent=found["bytes_sent"],
        bytes_received=found.get("bytes_received", 0),
        files_sent=found.get("files_sent", 0),
        total_size=found.get("total_size", 0),
        literal_bytes=found.get("literal_bytes", 0),
        matched_bytes=found.get("matched_bytes", 0),
        seconds=seconds,
    )


def checksum_differences(source: Path, dest: str, options: RsyncOptions) -> list[str]:
    """Paths where `dest` differs from `source` by content or attributes (a checksum dry
    run); empty when the copy matches."""
    argv = verify_argv(source, dest, options)
    done = subprocess.run(
        argv, capture_output=True, env=_env(options), timeout=options.timeout_s, check=False
    )
    if done.returncode != 0:
        raise _failure(argv, done.returncode, done.stderr.decode("utf-8", "replace"))
    paths = []
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        item = _ITEM.match(line)
        if item and not _only_dir_time(item[1]):
            paths.append(item[2])
    return paths


def _only_dir_time(code: str) -> bool:
    """`.d..t......`: a directory whose time alone differs (its content is checked by its
    entries); anything else is a difference."""
    return code.startswith(".d") and set(code[2:]) <= {".", "t"}

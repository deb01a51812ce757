"""The rsync transport, to a local directory and to an `rsync --daemon` on a loopback
port: hostile names, manifests (rsync's xxh128 digests, checked against libxxhash's own),
resume (a re-run sends and compares nothing; a partly populated destination is compared,
not sent; a source changed behind its size and mtime, an older manifest, or one a fresh
transfer must not read, are compared again), a corrupted copy caught and repaired, a
symlink in the staging area refused, stage-out back on-prem."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import StagingError
from clustermgr.staging import manifest
from clustermgr.staging.checks import StageIn, StageOut
from clustermgr.staging.progress import Quiet
from clustermgr.staging.rsync_transport import ALGO, CHANGING_NS
from clustermgr.staging.run import move_rsync
from tests.labs.rsyncd import RsyncDaemon

NAMES = ["plain.txt", "with space", "quote'\"both", "new\nline", "$(touch pwned);|&", "ü-utf8"]


def make_tree(root: Path) -> dict[str, str]:
    """Files with hostile names, in a subdirectory too; their sha256 by relative path."""
    (root / "sub dir").mkdir(parents=True)
    sums = {}
    for index, name in enumerate(NAMES):
        for rel in (name, f"sub dir/{name}"):
            data = os.urandom(1000 + index * 7)
            (root / rel).write_bytes(data)
            sums[rel] = hashlib.sha256(data).hexdigest()
    # older than a transfer that starts now by more than CHANGING_NS: a re-run trusts them
    time.sleep(2 * CHANGING_NS / 1e9)
    return sums


class _Xxh128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


def xxh128(data: bytes) -> str:
    """XXH3-128 by libxxhash (the library rsync itself links), as rsync prints it."""
    lib = ctypes.CDLL("libxxhash.so.0")
    lib.XXH3_128bits.restype = _Xxh128
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    found = lib.XXH3_128bits(data, len(data))
    return f"{found.high64:016x}{found.low64:016x}"


def tree_sums(root: Path) -> dict[str, str]:
    found = {}
    for base, _dirs, names in os.walk(root):
        for name in names:
            path = Path(base) / name
            rel = path.relative_to(root).as_posix()
            if not rel.startswith(".cmsub"):
                found[rel] = manifest.sha256_of(path)
    return found


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RsyncDaemon]:
    with RsyncDaemon(tmp_path / "director" / "staging", module="clustermgr-staging") as running:
        yield running


def target_area(tmp_path: Path, daemon: RsyncDaemon, target: str, where: str) -> tuple[Path, str]:
    """A staging area (where its files are, what the transfer is given): a local directory
    or `where` on the daemon."""
    if target == "local":
        return tmp_path / "area", str(tmp_path / "area")
    return daemon.root / where, f"{daemon.url}/{where}"


def tree_and_area(
    tmp_path: Path, daemon: RsyncDaemon, target: str, where: str
) -> tuple[Path, dict[str, str], Path, str]:
    """A source tree (make_tree) and its sums, and a staging area (target_area)."""
    src = tmp_path / "src"
    return src, make_tree(src), *target_area(tmp_path, daemon, target, where)


def corrupt_in_place(path: Path) -> None:
    """Other bytes, the same size and mtime: rsync's quick check cannot tell."""
    info = path.stat()
    path.write_bytes(bytes(b ^ 0xFF for b in path.read_bytes()))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def stage_in(src: Path, area: str, dest: str = "input") -> tuple[list[manifest.FileEntry], object]:
    return move_rsync("in", area, [StageIn(src, dest, src.is_dir())], [], Quiet())


@pytest.mark.parametrize("target", ["local", "daemon"])
def test_stage_in_keeps_names_exact_writes_a_manifest_and_resumes(
    tmp_path: Path, daemon: RsyncDaemon, target: str
) -> None:
    src, sums, local_area, area = tree_and_area(tmp_path, daemon, target, "alice/s1")

    entries, report = move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet())
    assert tree_sums(local_area / "input") == sums
    assert report.files_sent == len(sums) and report.files_compared == 0  # type: ignore[attr-defined]
    assert {e.path for e in entries} == {f"input/{rel}" for rel in sums}
    written = manifest.decode((local_area / ".cmsub" / "in.json").read_bytes(), ALGO).entries
    for rel in sums:  # rsync's digest of every file, the one the receiver's copy matched
        assert written[f"input/{rel}"].digest == xxh128((src / rel).read_bytes())
    assert not (Path.cwd() / "pwned").exists()

    _entries, again = move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet())
    assert (again.files_sent, again.files_compared) == (0, 0)  # verified files skipped


@pytest.mark.parametrize("target", ["local", "daemon"])
def test_a_partly_copied_destination_is_compared_and_a_corrupt_file_repaired(
    tmp_path: Path, daemon: RsyncDaemon, target: str
) -> None:
    src, sums, local_area, area = tree_and_area(tmp_path, daemon, target, "bob/s2")
    # an earlier run was interrupted: half the files arrived (same size and time), and one
    # of them was corrupted in place without changing its size or time
    (local_area / "input" / "sub dir").mkdir(parents=True)
    arrived = sorted(sums)[: len(sums) // 2]
    for rel in arrived:
        shutil.copy2(src / rel, local_area / "input" / rel)
    corrupt_in_place(local_area / "input" / arrived[0])

    _entries, report = move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet())
    assert report.files_sent >= len(sums) - len(arrived)
    assert report.files_compared == len(arrived)
    assert report.files_repaired == 1
    assert tree_sums(local_area / "input") == sums


@pytest.mark.parametrize("target", ["local", "daemon"])
def test_a_source_changed_behind_its_size_and_mtime_is_compared_and_sent_again(
    tmp_path: Path, daemon: RsyncDaemon, target: str
) -> None:
    src, sums, local_area, area = tree_and_area(tmp_path, daemon, target, "dave/s5")
    move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet(), fresh=True)
    # the manifest vouches for every file, but this one is not the file it verified any more:
    # its ctime moved (no write, nor setting the mtime back, can keep it)
    corrupt_in_place(src / "sub dir" / "with space")

    _entries, again = move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet())
    assert (again.files_sent, again.files_compared, again.files_repaired) == (0, 1, 1)
    assert tree_sums(local_area / "input") == tree_sums(src) != sums


class Notes:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def begin(self, label: str, total_bytes: int) -> None:
        return None

    def advance(self, nbytes: int) -> None:
        return None

    def note(self, line: str) -> None:
        self.lines.append(line)

    def end(self) -> None:
        return None


def test_a_fresh_transfer_and_an_older_manifest_trust_nothing(
    tmp_path: Path, daemon: RsyncDaemon
) -> None:
    src = tmp_path / "src"
    sums = make_tree(src)
    on_director = daemon.root / "erin" / "s6"
    area = f"{daemon.url}/erin/s6"
    move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet(), fresh=True)
    assert tree_sums(on_director / "input") == sums
    # the copy is corrupted behind the manifest's back; a transfer the service calls fresh
    # does not read the manifest (there should be none): every file is compared, the bad
    # one found and sent again
    corrupt_in_place(on_director / "input" / "plain.txt")
    _e, fresh = move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet(), fresh=True)
    assert (fresh.files_sent, fresh.files_compared, fresh.files_repaired) == (0, len(sums), 1)
    assert tree_sums(on_director / "input") == sums

    # a manifest an older cmsub wrote (format 1: sha256 of the local side) is not trusted
    old = {
        "format": 1,
        "direction": "in",
        "files": [
            {"path": f"input/{rel}", "size": (src / rel).stat().st_size, "sha256": digest}
            | {"mtime_ns": (src / rel).stat().st_mtime_ns}
            for rel, digest in sums.items()
        ],
    }
    (on_director / ".cmsub" / "in.json").write_text(json.dumps(old))
    corrupt_in_place(on_director / "input" / "new\nline")
    notes = Notes()
    _e, again = move_rsync("in", area, [StageIn(src, "input", True)], [], notes)
    assert (again.files_sent, again.files_compared, again.files_repaired) == (0, len(sums), 1)
    assert tree_sums(on_director / "input") == sums
    assert any("digests are sha256" in line for line in notes.lines), notes.lines


def test_a_single_file_and_stage_out_through_the_daemon(
    tmp_path: Path, daemon: RsyncDaemon
) -> None:
    data = tmp_path / "in put.bin"
    data.write_bytes(os.urandom(300_000))
    area = f"{daemon.url}/carol/s3"
    stage_in(data, area, "data/file.bin")
    on_director = daemon.root / "carol" / "s3"
    assert (on_director / "data" / "file.bin").read_bytes() == data.read_bytes()
    # the job writes its results into the staging area
    results = on_director / "results dir"
    results.mkdir()
    (results / "out\n1.txt").write_text("result one")
    (on_director / "summary.csv").write_text("a,b\n")
    home = tmp_path / "home"
    home.mkdir()
    entries, report = move_rsync(
        "out",
        area,
        [],
        [StageOut("results dir", home / "results"), StageOut("summary.csv", home)],
        Quiet(),
    )
    # DEST is a directory: a directory SRC's contents into it, a file SRC by its name
    assert (home / "results" / "out\n1.txt").read_text() == "result one"
    assert (home / "summary.csv").read_text() == "a,b\n"
    assert report.files_total == 2 and len(entries) == 2
    assert (on_director / ".cmsub" / "out.json").is_file()


def test_a_symlink_in_the_staging_area_is_refused_at_transfer_time(tmp_path: Path) -> None:
    src = tmp_path / "f"
    src.write_text("x")
    area = tmp_path / "area"
    area.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (area / "input").symlink_to(outside)
    with pytest.raises(StagingError, match="goes through symlink"):
        stage_in(src, str(area), "input/f")
    assert not (outside / "f").exists()


def test_an_unreachable_daemon_is_one_line(tmp_path: Path) -> None:
    src = tmp_path / "f"
    src.write_text("x")
    with pytest.raises(StagingError) as caught:
        stage_in(src, "rsync://127.0.0.1:1/none/a/b", "f")
    assert "exited" in str(caught.value) and "\n" not in str(caught.value)

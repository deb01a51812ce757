"""The rsync transport, to a local directory and to an `rsync --daemon` on a loopback
port: hostile names, manifests, resume (a re-run sends and compares nothing; a partly
populated destination is compared, not sent), a corrupted copy caught and repaired, a
symlink in the staging area refused, stage-out back on-prem."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.errors import StagingError
from clustermgr.staging import manifest
from clustermgr.staging.checks import StageIn, StageOut
from clustermgr.staging.progress import Quiet
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
    return sums


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


def stage_in(src: Path, area: str, dest: str = "input") -> tuple[list[manifest.FileEntry], object]:
    return move_rsync("in", area, [StageIn(src, dest, src.is_dir())], [], Quiet())


@pytest.mark.parametrize("target", ["local", "daemon"])
def test_stage_in_keeps_names_exact_writes_a_manifest_and_resumes(
    tmp_path: Path, daemon: RsyncDaemon, target: str
) -> None:
    src = tmp_path / "src"
    sums = make_tree(src)
    local_area = (tmp_path / "area") if target == "local" else daemon.root / "alice" / "s1"
    area = str(local_area) if target == "local" else f"{daemon.url}/alice/s1"

    entries, report = move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet())
    assert tree_sums(local_area / "input") == sums
    assert report.files_sent == len(sums) and report.files_compared == 0  # type: ignore[attr-defined]
    assert {e.path for e in entries} == {f"input/{rel}" for rel in sums}
    written = manifest.decode((local_area / ".cmsub" / "in.json").read_bytes())
    assert written["input/new\nline"].sha256 == sums["new\nline"]
    assert not (Path.cwd() / "pwned").exists()

    _entries, again = move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet())
    assert (again.files_sent, again.files_compared) == (0, 0)  # verified files skipped


@pytest.mark.parametrize("target", ["local", "daemon"])
def test_a_partly_copied_destination_is_compared_and_a_corrupt_file_repaired(
    tmp_path: Path, daemon: RsyncDaemon, target: str
) -> None:
    src = tmp_path / "src"
    sums = make_tree(src)
    local_area = (tmp_path / "area") if target == "local" else daemon.root / "bob" / "s2"
    area = str(local_area) if target == "local" else f"{daemon.url}/bob/s2"
    # an earlier run was interrupted: half the files arrived (same size and time), and one
    # of them was corrupted in place without changing its size or time
    (local_area / "input" / "sub dir").mkdir(parents=True)
    arrived = sorted(sums)[: len(sums) // 2]
    for rel in arrived:
        shutil.copy2(src / rel, local_area / "input" / rel)
    bad = local_area / "input" / arrived[0]
    info = bad.stat()
    bad.write_bytes(b"\0" * info.st_size)
    os.utime(bad, ns=(info.st_atime_ns, info.st_mtime_ns))

    _entries, report = move_rsync("in", area, [StageIn(src, "input", True)], [], Quiet())
    assert report.files_sent >= len(sums) - len(arrived)
    assert report.files_compared == len(arrived)
    assert report.files_repaired == 1
    assert tree_sums(local_area / "input") == sums


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
        [StageOut("results dir", home / "results"), StageOut("summary.csv", home / "s.csv")],
        Quiet(),
    )
    assert (home / "results" / "out\n1.txt").read_text() == "result one"
    assert (home / "s.csv").read_text() == "a,b\n"
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

"""No result lost at stage-out, through the real rsync transport (a local area and an
`rsync --daemon`): a rerun into the same DEST keeps the earlier results (DEST/<jobid>/
each), `--overwrite` replaces only the files sent, each by rename (a file there before is
old or new, never half-written, watched while it happens) and never depends on files only
the destination holds; a conflict is one line before any byte is written; a failed job's
results come back into DEST/<jobid>.partial/."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import StagingError
from clustermgr.staging import landing
from clustermgr.staging.checks import StageOut
from clustermgr.staging.progress import Quiet
from clustermgr.staging.run import move_rsync
from tests.labs.rsyncd import RsyncDaemon


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RsyncDaemon]:
    with RsyncDaemon(tmp_path / "director" / "staging", module="clustermgr-staging") as running:
        yield running


def area_of(tmp_path: Path, daemon: RsyncDaemon, target: str) -> tuple[Path, str]:
    """Where the job's files are, and what the transfer is given."""
    if target == "local":
        return tmp_path / "area", str(tmp_path / "area")
    return daemon.root / "alice" / "s1", f"{daemon.url}/alice/s1"


def stage_out(area: str, items: list[StageOut], job: str, *, partial: bool = False) -> list[Path]:
    _moved, placed = landing.land(
        items, job, lambda aimed: move_rsync("out", area, [], aimed, Quiet()), partial=partial
    )
    return placed


def write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)


def hidden(dest: Path) -> list[str]:
    return [p.name for p in dest.iterdir() if p.name.startswith(".cmsub-")]


@pytest.mark.parametrize("target", ["local", "daemon"])
def test_a_rerun_into_the_same_dest_keeps_the_earlier_results(
    tmp_path: Path, daemon: RsyncDaemon, target: str
) -> None:
    on_disk, area = area_of(tmp_path, daemon, target)
    write(on_disk / "results" / "all.txt", "run one")
    write(on_disk / "summary.csv", "1\n")
    dest = tmp_path / "home" / "run7"  # made by the stage-out
    items = [StageOut("results", dest), StageOut("summary.csv", dest)]
    assert stage_out(area, items, "101") == [dest / "101"]

    write(on_disk / "results" / "all.txt", "run two")  # the same job script, run again
    write(on_disk / "summary.csv", "2\n")
    assert stage_out(area, items, "102") == [dest / "102"]

    assert (dest / "101" / "all.txt").read_text() == "run one"
    assert (dest / "101" / "summary.csv").read_text() == "1\n"
    assert (dest / "102" / "all.txt").read_text() == "run two"
    assert (dest / "102" / "summary.csv").read_text() == "2\n"
    assert sorted(p.name for p in dest.iterdir()) == ["101", "102"]  # nothing hidden left


@pytest.mark.parametrize("target", ["local", "daemon"])
def test_overwrite_replaces_only_the_files_sent_each_atomically(
    tmp_path: Path, daemon: RsyncDaemon, target: str
) -> None:
    on_disk, area = area_of(tmp_path, daemon, target)
    old = b"old " * 1_000_000
    new = b"NEW!" * 1_500_000
    write(on_disk / "results" / "all.txt", new)
    write(on_disk / "results" / "sub" / "fresh.txt", "fresh")
    dest = tmp_path / "home" / "out"
    write(dest / "all.txt", old)
    write(dest / "all.txt.orig", "only the user's folder has this")  # the failure
    write(dest / "sub" / "keep.txt", "keep")
    (dest / "dangling").symlink_to(dest / "nowhere")  # another file only DEST holds
    seen: list[bytes] = []
    watching = threading.Event()
    watching.set()

    def watch() -> None:  # a reader of DEST/all.txt all along
        while watching.is_set():
            seen.append((dest / "all.txt").read_bytes())

    during: list[bytes] = []

    def move(aimed: list[StageOut]) -> object:
        result = move_rsync("out", area, [], aimed, Quiet())
        during.append((dest / "all.txt").read_bytes())  # every byte sent: DEST untouched
        return result

    reader = threading.Thread(target=watch)
    reader.start()
    try:
        _moved, placed = landing.land([StageOut("results", dest, overwrite=True)], "103", move)
    finally:
        watching.clear()
        reader.join()

    assert placed == [dest]
    assert during == [old]
    assert (dest / "all.txt").read_bytes() == new
    assert (dest / "sub" / "fresh.txt").read_text() == "fresh"
    assert (dest / "all.txt.orig").read_text() == "only the user's folder has this"
    assert (dest / "sub" / "keep.txt").read_text() == "keep"
    assert (dest / "dangling").is_symlink()
    assert hidden(dest) == []
    assert seen and all(data in (old, new) for data in seen)  # never half-written


def test_a_conflict_is_refused_before_any_byte_is_written(tmp_path: Path) -> None:
    on_disk, area = tmp_path / "area", str(tmp_path / "area")
    write(on_disk / "results" / "all.txt", "new")
    dest = tmp_path / "home" / "out"
    write(dest / "104" / "all.txt", "someone's earlier results")
    calls: list[object] = []

    def move(aimed: list[StageOut]) -> object:
        calls.append(aimed)
        return move_rsync("out", area, [], aimed, Quiet())

    with pytest.raises(StagingError) as caught:
        landing.land([StageOut("results", dest)], "104", move)
    assert f"{dest / '104'}" in str(caught.value) and "nothing written" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert calls == []  # the transport never ran
    assert (dest / "104" / "all.txt").read_text() == "someone's earlier results"
    assert hidden(dest) == []

    # DEST itself a file: refused, the file kept
    write(tmp_path / "home" / "file", "mine")
    with pytest.raises(StagingError, match="is not a directory: nothing written"):
        landing.land([StageOut("results", tmp_path / "home" / "file")], "105", move)
    assert calls == [] and (tmp_path / "home" / "file").read_text() == "mine"


def test_overwrite_refuses_a_file_where_a_directory_goes_and_moves_nothing(
    tmp_path: Path,
) -> None:
    on_disk, area = tmp_path / "area", str(tmp_path / "area")
    write(on_disk / "results" / "all.txt", "new")
    write(on_disk / "results" / "sub" / "x", "new x")
    dest = tmp_path / "out"
    write(dest / "all.txt", "old")
    write(dest / "sub", "a file where the results have a directory")
    with pytest.raises(StagingError) as caught:
        stage_out(area, [StageOut("results", dest, overwrite=True)], "106")
    assert f"{dest / 'sub'}' is a file where the results have a directory" in str(caught.value)
    assert (dest / "all.txt").read_text() == "old"  # nothing moved into DEST
    assert (dest / landing.temp_name("106") / "all.txt").read_text() == "new"  # kept aside


def test_a_failed_jobs_results_come_back_marked_partial(tmp_path: Path) -> None:
    on_disk, area = tmp_path / "area", str(tmp_path / "area")
    write(on_disk / "results" / "all.txt", "half")
    dest = tmp_path / "out"
    write(dest / "all.txt", "good results of an earlier run")
    placed = stage_out(area, [StageOut("results", dest, overwrite=True)], "107", partial=True)
    assert placed == [dest / "107.partial"]  # even with --overwrite: never over results
    assert (dest / "107.partial" / "all.txt").read_text() == "half"
    assert (dest / "all.txt").read_text() == "good results of an earlier run"


def test_a_failed_transfer_leaves_dest_as_it_was(tmp_path: Path) -> None:
    area = tmp_path / "area"
    area.mkdir()
    dest = tmp_path / "out"
    write(dest / "all.txt", "old")
    with pytest.raises(StagingError):
        stage_out(str(area), [StageOut("never written", dest)], "108")
    assert sorted(os.listdir(dest)) == ["all.txt"]
    assert (dest / "all.txt").read_text() == "old"

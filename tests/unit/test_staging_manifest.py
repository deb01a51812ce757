"""Staging manifests and rsync's itemized lines: a manifest round-trips, names its digest
algorithm, and one of another algorithm, an unknown format or no manifest at all is
refused with the reason (its files are compared again); a format-1 manifest reads as
sha256; an entry with no ctime is never trusted; rsync's `%i %l %C %n` lines give each
regular file's code, area path, size and digest, whatever its name holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustermgr.staging import manifest
from clustermgr.staging.manifest import FileEntry
from clustermgr.staging.rsync_transport import Pair, _files, _sent

XXH = "f4d0497cf9394caab34d1a3ab2bece70"


def test_a_manifest_round_trips_with_its_algorithm() -> None:
    entries = [
        FileEntry("in/b", 3, 20, XXH, 30),
        FileEntry("in/new\nline ü", 0, 21, "0" * 32, 31),
    ]
    raw = manifest.encode(entries, "in", manifest.XXH128)
    assert json.loads(raw)["algo"] == "xxh128"
    read = manifest.decode(raw, manifest.XXH128)
    assert read.refused == "" and read.entries == {e.path: e for e in entries}


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (manifest.encode([FileEntry("a", 1, 2, "ab", 3)], "in", "sha256"), "digests are sha256"),
        (b'{"format": 9, "files": []}', "format 9"),
        (b"not json", "not a manifest"),
        (b'{"format": 2, "algo": "xxh128", "files": [["a", "1", 2, 3, "d"]]}', "not a manifest"),
        (b'{"format": 2, "algo": "xxh128", "files": [["a", 1, 2]]}', "not a manifest"),
    ],
)
def test_a_manifest_not_of_this_algorithm_or_format_is_refused(raw: bytes, why: str) -> None:
    read = manifest.decode(raw, manifest.XXH128)
    assert read.entries == {} and why in read.refused


def test_a_format_1_manifest_reads_as_sha256() -> None:
    old = {
        "format": 1,
        "direction": "in",
        "files": [{"path": "a", "size": 1, "mtime_ns": 2, "sha256": "ab" * 32}],
    }
    raw = json.dumps(old).encode()
    assert manifest.decode(raw, manifest.SHA256).entries["a"].digest == "ab" * 32
    assert "sha256" in manifest.decode(raw, manifest.XXH128).refused


def test_an_entry_is_trusted_only_for_the_same_size_mtime_and_ctime() -> None:
    verified = FileEntry("a", 10, 100, XXH, 200)
    assert verified.unchanged(FileEntry("a", 10, 100, "", 200))
    assert not verified.unchanged(FileEntry("a", 10, 100, "", 201))  # written since
    assert not verified.unchanged(FileEntry("a", 11, 100, "", 200))
    racing = FileEntry("a", 10, 100, XXH, 0)  # changed while rsync read it
    assert not racing.unchanged(FileEntry("a", 10, 100, "", 0))


def test_rsync_lines_give_each_regular_file_with_its_digest() -> None:
    pair = Pair("/src/", "rsync://d/m/u/s/in/", "in", Path("/src"), True, True)
    blank = " " * 32
    output = "\n".join(
        [
            f"cd+++++++++ 4096 {blank} ./",
            f"<f+++++++++ 3 {XXH} y",
            f"<f+++++++++ 0 {'1' * 32}  leading space",
            f"<f..t...... 12 {'2' * 32} new\\#012line $(x);|",
            f".f          7 {blank} unchanged",
            f".f          7 {'3' * 32} same by checksum",
            f"cL+++++++++ 5 {blank} link",
            "",
        ]
    )
    found = list(_files(output, pair))
    assert [(c[:2], rel, size, digest) for c, rel, size, digest in found] == [
        ("<f", "in/y", 3, XXH),
        ("<f", "in/ leading space", 0, "1" * 32),
        ("<f", "in/new\nline $(x);|", 12, "2" * 32),
        (".f", "in/unchanged", 7, ""),
        (".f", "in/same by checksum", 7, "3" * 32),
    ]
    assert _sent(output, pair) == {
        "in/y": (3, XXH),
        "in/ leading space": (0, "1" * 32),
        "in/new\nline $(x);|": (12, "2" * 32),
    }

"""cmsub's spec: sbatch options pass through, #CMSUB directives only in the leading
comment block, hostile file names kept exact, DEST inside the staging area, the quota."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.core.errors import UsageError
from clustermgr.staging.checks import (
    area_path,
    check_quota,
    check_stage_in,
    check_stage_out,
    estimate,
)
from clustermgr.staging.spec import StageItem, parse_argv, split_item

HOSTILE = [
    "with space",
    "quote'single",
    'quote"double',
    "new\nline",
    "$(touch pwned)",
    "semi;colon&amp|pipe",
    "star*glob?",
    "back\\slash",
    "-dash-first",
    "colon:inside",
]


def script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.sh"
    path.write_text(text)
    return path


def test_sbatch_options_pass_through_and_cmsub_options_are_taken(tmp_path: Path) -> None:
    job = script(tmp_path, "#!/bin/sh\necho hi\n")
    (tmp_path / "data").mkdir()
    spec = parse_argv(
        [
            "-N",
            "2",
            "--time=10",
            "-J",
            "name with space",
            "--mem",
            "4G",
            "--exclusive",
            "--stage-in",
            f"{tmp_path / 'data'}:in/data",
            "--stage-out=results:",
            "--transport",
            "s3",
            "--json",
            str(job),
            "arg 1",
            "--stage-in",
        ]
    )
    assert spec.sbatch_args == (
        "-N",
        "2",
        "--time=10",
        "-J",
        "name with space",
        "--mem",
        "4G",
        "--exclusive",
    )
    assert spec.stage_in[0].source == str(tmp_path / "data")
    assert spec.stage_in[0].dest == "in/data"
    assert spec.stage_out[0].source == "results"
    assert spec.transport == "s3"
    assert spec.as_json
    assert spec.script == job
    assert spec.script_args == ("arg 1", "--stage-in")  # the script's own arguments


def test_directives_only_in_the_leading_comment_block(tmp_path: Path) -> None:
    job = script(
        tmp_path,
        "#!/bin/bash\n"
        "#SBATCH -N 1\n"
        "\n"
        "#CMSUB --stage-in 'my input.dat:in put'\n"
        "# a comment\n"
        "#CMSUB --stage-out out --transport rsync\n"
        "echo start\n"
        "#CMSUB --stage-in ignored\n",
    )
    spec = parse_argv([str(job)])
    assert [(i.source, i.dest) for i in spec.stage_in] == [("my input.dat", "in put")]
    assert spec.stage_in[0].origin == f"{job}:4"
    assert [i.source for i in spec.stage_out] == ["out"]
    assert spec.transport == "rsync"


def test_the_command_line_overrides_the_scripts_lines_for_the_same_option(
    tmp_path: Path,
) -> None:
    job = script(
        tmp_path,
        "#!/bin/bash\n"
        "#CMSUB --stage-in data:input --stage-in more:input/more\n"
        "#CMSUB --stage-out out:/results --transport s3 --region aws\n"
        "run\n",
    )
    spec = parse_argv(["--stage-in", "cli:input", "--transport", "rsync", str(job)])
    # sbatch's rule: the command line's --stage-in replaces every #CMSUB --stage-in ...
    assert [(i.source, i.dest, i.origin) for i in spec.stage_in] == [
        ("cli", "input", "command line")
    ]
    assert spec.transport == "rsync"
    # ... and what the command line does not name still comes from the script
    assert [(i.source, i.dest) for i in spec.stage_out] == [("out", "/results")]
    assert spec.region == "aws"
    assert not spec.overwrite
    spec = parse_argv(["--stage-out", "r:/elsewhere", "--overwrite", str(job)])
    assert [(i.source, i.dest) for i in spec.stage_out] == [("r", "/elsewhere")]
    assert spec.overwrite
    assert [i.source for i in spec.stage_in] == ["data", "more"]
    scripted = script(tmp_path, "#!/bin/bash\n#CMSUB --overwrite\nrun\n")
    assert parse_argv([str(scripted)]).overwrite


def test_words_after_the_script_are_the_scripts_with_a_warning_for_lookalikes(
    tmp_path: Path,
) -> None:
    job = script(tmp_path, "#!/bin/sh\n")
    spec = parse_argv(["--json", str(job), "--dry-run", "plain", "--stage-out=x"])
    assert not spec.dry_run  # not acted on: the script gets it
    assert spec.as_json
    assert spec.script_args == ("--dry-run", "plain", "--stage-out=x")
    assert len(spec.warnings) == 2
    assert "--dry-run comes after the script" in spec.warnings[0]
    assert "passed to the script, not acted on" in spec.warnings[0]
    assert "--stage-out comes after the script" in spec.warnings[1]
    assert all("\n" not in w for w in spec.warnings)
    assert parse_argv(["--dry-run", str(job), "a"]).warnings == ()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-p", "x", "job.sh"], "--partition is set by cmsub"),
        (["--partition=x", "job.sh"], "--partition is set by cmsub"),
        (["-dafterok:1", "job.sh"], "--dependency is set by cmsub"),
        (["--transport", "ftp", "job.sh"], "use rsync or s3"),
        (["-N", "1"], "no job script"),
        (["missing.sh"], "does not exist"),
    ],
)
def test_bad_command_lines_are_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    script(tmp_path, "#!/bin/sh\n")
    with pytest.raises(UsageError) as caught:
        parse_argv(argv)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert caught.value.exit_code == 2


def test_a_bad_directive_names_file_and_line(tmp_path: Path) -> None:
    job = script(tmp_path, "#!/bin/sh\n#CMSUB --stage-in 'unclosed\n")
    with pytest.raises(UsageError, match=r"job\.sh:2"):
        parse_argv([str(job)])
    job = script(tmp_path, "#!/bin/sh\n#CMSUB --nodes 2\n")
    with pytest.raises(UsageError, match=r"job\.sh:2: '--nodes' is not a cmsub option"):
        parse_argv([str(job)])


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_kept_exact(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("x")
    item = split_item(str(tmp_path / name), "in", "command line")
    assert item.source == str(tmp_path / name)
    assert item.dest == ""
    checked = check_stage_in(item, tmp_path)
    assert checked.source == tmp_path / name
    assert checked.dest == name
    dest = check_stage_in(StageItem(str(tmp_path / name), name, "t"), tmp_path).dest
    assert dest == name


@pytest.mark.parametrize(
    "dest, message",
    [
        ("../x", "leaves the staging area"),
        ("a/../../b", "leaves the staging area"),
        ("/etc/passwd", "is absolute"),
        (".", "names the staging area itself"),
        (".cmsub/in.json", "cmsub's own"),
        ("", "empty"),
    ],
)
def test_dest_must_stay_inside_the_staging_area(dest: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        area_path(dest, "DEST")


def test_area_paths_are_normalised() -> None:
    assert area_path("a//b/./c", "DEST") == "a/b/c"


def test_missing_source_and_symlink_escaping_the_tree(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        check_stage_in(StageItem("nope", "", "command line"), tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ok").write_text("1")
    (tree / "inner").symlink_to("ok")
    checked = check_stage_in(StageItem(str(tree), "", "command line"), tmp_path)
    assert estimate([checked]).files_total == 1
    (tree / "evil").symlink_to("/etc/shadow")
    with pytest.raises(UsageError, match="points outside the tree"):
        estimate([checked])
    (tree / "evil").unlink()
    (tree / "up").symlink_to("../..")
    with pytest.raises(UsageError, match="points outside the tree"):
        estimate([checked])


def test_stage_out_destination_must_be_writable_dir(tmp_path: Path) -> None:
    out = check_stage_out(StageItem("results", "", "command line"), tmp_path)
    assert out.dest == tmp_path / "results"
    with pytest.raises(UsageError, match="does not exist"):
        check_stage_out(StageItem("results", "no/such/dir/x", "command line"), tmp_path)
    with pytest.raises(UsageError, match="leaves the staging area"):
        check_stage_out(StageItem("../results", "", "command line"), tmp_path)
    # DEST is the directory results go into: an existing file there is refused, named
    (tmp_path / "all.txt").write_text("the user's")
    with pytest.raises(UsageError) as caught:
        check_stage_out(StageItem("all.txt", str(tmp_path / "all.txt"), "job.sh:3"), tmp_path)
    assert f"job.sh:3: --stage-out 'all.txt:{tmp_path}/all.txt'" in str(caught.value)
    assert f"DEST '{tmp_path}/all.txt' is an existing file" in str(caught.value)
    assert (tmp_path / "all.txt").read_text() == "the user's"
    assert check_stage_out(StageItem("r", str(tmp_path), "x"), tmp_path, overwrite=True).overwrite


def test_estimate_sums_a_tree_and_the_quota_says_how_much(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"x" * 100)
    (tmp_path / "d" / "b").write_bytes(b"x" * 50)
    (tmp_path / "f").write_bytes(b"x" * 7)
    items = [
        check_stage_in(StageItem(str(tmp_path / "d"), "", "t"), tmp_path),
        check_stage_in(StageItem(str(tmp_path / "f"), "", "t"), tmp_path),
    ]
    found = estimate(items)
    assert (found.bytes_total, found.files_total) == (157, 3)
    check_quota("alice", 0, 157, 157)
    with pytest.raises(UsageError) as caught:
        check_quota("alice", 100, 157, 200)
    assert "257 of a 200-byte quota (100 held" in str(caught.value)

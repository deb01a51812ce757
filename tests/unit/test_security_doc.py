"""docs/security.md says only what a test proves: every row of its attack table names a test,
every section is covered by rows or names its test, and every test it (or any other doc)
names exists, so a renamed or deleted test cannot leave a claim standing
on nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SECURITY = ROOT / "docs" / "security.md"
CHECKED_DOCS = (*sorted(ROOT.glob("docs/*.md")), ROOT / "README.md")

# `tests/security/test_spool.py::test_x`, a short `test_staging.py::test_y` (the file named
# earlier in the same line, or the one file of that name under tests/), and `::test_z`, a
# further test of the file named last in the paragraph; `[param]` suffixes are ignored
REFERENCE = re.compile(r"((?:tests/[\w/]+/)?test_\w+\.py)(::\w+)?|(::test_\w+)")


@dataclass(frozen=True)
class Reference:
    doc: str
    line: int
    text: str


def _test_files() -> dict[str, list[Path]]:
    by_name: dict[str, list[Path]] = {}
    for path in sorted(ROOT.glob("tests/**/test_*.py")):
        by_name.setdefault(path.name, []).append(path)
    return by_name


def _defines(path: Path, name: str) -> bool:
    definition = rf"^\s*(?:async\s+)?def {re.escape(name)}\("
    return re.search(definition, path.read_text(), re.M) is not None


def unresolved_references(doc: Path) -> list[Reference]:
    """The test references in `doc` that name no existing test file or function."""
    by_name = _test_files()
    bad: list[Reference] = []
    candidates: list[Path] = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("|"):
            candidates = []  # a `::test` goes on from a file named earlier in its paragraph
        for match in REFERENCE.finditer(line):
            file_part, name_part, continuation = match.groups()
            if file_part:
                if "/" in file_part:
                    candidates = [ROOT / file_part] if (ROOT / file_part).exists() else []
                else:
                    same_dir = [c.parent / file_part for c in candidates]
                    candidates = [p for p in same_dir if p.exists()] or by_name.get(file_part, [])
                if not candidates:
                    bad.append(Reference(doc.name, number, f"{file_part}: no such test file"))
                    continue
            name = (name_part or continuation or "")[2:]
            if name and candidates and not any(_defines(p, name) for p in candidates):
                where = ", ".join(str(p.relative_to(ROOT)) for p in candidates)
                bad.append(Reference(doc.name, number, f"{where}::{name}: no such test"))
            if continuation and not candidates:
                bad.append(Reference(doc.name, number, f"{continuation}: no file named before it"))
    return bad


def _attack_rows(text: str) -> list[tuple[int, str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## Attacks and their tests"))
    rows = []
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("## "):
            break
        if line.startswith("|") and not re.match(r"^\|\s*-", line):
            rows.append((number, line))
    return rows[1:]  # the header


@pytest.mark.parametrize("doc", CHECKED_DOCS, ids=lambda p: p.name)
def test_every_test_the_doc_names_exists(doc: Path) -> None:
    assert unresolved_references(doc) == []


def test_every_attack_row_names_the_test_that_proves_it() -> None:
    rows = _attack_rows(SECURITY.read_text())
    assert len(rows) > 40
    unproven = [(number, row[:120]) for number, row in rows if not REFERENCE.search(row)]
    assert unproven == []


def test_every_section_is_proven_by_rows_or_names_its_test() -> None:
    text = SECURITY.read_text()
    sections = re.findall(r"<!-- section: (\w[\w-]*) -->", text)
    with_rows = set(re.findall(r"<!-- rows: (\w[\w-]*) -->", text))
    prose = text.split("## Attacks and their tests")[0]
    bodies = re.split(r"<!-- section: \w[\w-]* -->", prose)[1:]
    naked = [
        section
        for section, body in zip(sections, bodies, strict=True)
        if section not in with_rows and not REFERENCE.search(body)
    ]
    assert sections and naked == []


def test_the_checker_catches_a_test_that_is_gone(tmp_path: Path) -> None:
    doc = tmp_path / "claims.md"
    doc.write_text(
        "| x | y | tests/security/test_spool.py::test_slurm_users_request_is_accepted |\n"
        "| x | y | tests/security/test_spool.py::test_that_was_renamed, ::test_also_gone |\n"
        "| x | y | test_nothing_here.py::test_x |\n"
    )
    found = [(r.line, r.text) for r in unresolved_references(doc)]
    assert found == [
        (2, "tests/security/test_spool.py::test_that_was_renamed: no such test"),
        (2, "tests/security/test_spool.py::test_also_gone: no such test"),
        (3, "test_nothing_here.py: no such test file"),
    ]

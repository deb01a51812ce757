"""One output layer (clustermgr.cli.output over core.logsafe.say): what it prints, and that
nothing in the package prints around it."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest

from clustermgr.cli.output import (
    echo,
    echo_click_error,
    echo_error,
    emit_document,
    emit_fields,
    emit_grid,
    emit_json,
    emit_table,
    progress_label,
)

pytestmark = pytest.mark.unit
PACKAGE = Path(__file__).resolve().parents[2] / "clustermgr"
LAYER = {PACKAGE / "cli" / "output.py", PACKAGE / "core" / "logsafe.py"}
# a call allowed outside the layer, and why: a rich progress bar prints its notes above the
# bar through its own console; the note is a rich Text (no markup) escaped where it is made
ALLOWED = {("staging/progress.py", "self.rich.console.print")}

HOSTILE = "\x1b]52;c;ZXZpbA==\x07\x9b2J\u202eexe\u200b\x7f\r\nFAKE [red]x[/red] [link=h]y[/link]"
SHOWN = r"\x1b]52;c;ZXZpbA==\x07\x9b2J\u202eexe\u200b\x7f\r\nFAKE [red]x[/red] [link=h]y[/link]"


def _printing_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Calls that write to the terminal themselves: print, click.echo/secho, anything's
    .print (rich consoles), sys.stdout/stderr.write, traceback printing, click's .show."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        last = name.rsplit(".", 1)[-1]
        if (
            name in ("print", "pprint", "click.echo", "click.secho", "click.echo_via_pager")
            or last in ("print", "print_exc", "print_exception", "print_tb", "print_stack")
            or name in ("sys.stdout.write", "sys.stderr.write", "exc.show", "error.show")
        ):
            yield node.lineno, name


def test_nothing_in_the_package_prints_around_the_output_layer() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in LAYER:
            continue
        relative = str(path.relative_to(PACKAGE))
        for line, name in _printing_calls(ast.parse(path.read_text(), str(path))):
            if (relative, name) not in ALLOWED:
                found.append(f"{relative}:{line}: {name}(...)")
    assert not found, "print through clustermgr.cli.output (or core.logsafe.say):\n" + "\n".join(
        found
    )


def test_the_scan_sees_each_way_of_printing() -> None:
    source = (
        "print(x)\nclick.echo(x)\nclick.secho(x)\nConsole().print(x)\nsys.stdout.write(x)\n"
        "sys.stderr.write(x)\ntraceback.print_exc()\nexc.show()\nfile.write(x)\n"
    )
    assert [line for line, _ in _printing_calls(ast.parse(source))] == [1, 2, 3, 4, 5, 6, 7, 8]


def _no_raw(text: str) -> None:
    allowed_breaks = text.replace("\n", "")
    assert all(char.isprintable() and char not in "\u202e\u200b" for char in allowed_breaks), repr(
        text
    )


def test_a_line_shows_every_unsafe_character_as_an_escape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    echo(f"reason: {HOSTILE}")
    echo_error("clustermgr", f"tag {HOSTILE}")
    out, err = capsys.readouterr()
    assert out == f"reason: {SHOWN}\n"
    assert err == f"clustermgr: error: tag {SHOWN}\n"


def test_tables_and_records_escape_values_and_read_no_markup(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one cell on one line
    emit_table([{"name": "n1", "reason": HOSTILE}], ["name", "reason"], title=f"of {HOSTILE}")
    emit_fields({"name": "n1", "reason": HOSTILE, "at": datetime(2026, 1, 2, tzinfo=UTC)})
    emit_grid([HOSTILE], [["cost", HOSTILE]])
    out, err = capsys.readouterr()
    _no_raw(out)
    assert out.count(SHOWN) == 5 and err == ""
    assert "reason  " + SHOWN in out and "at      2026-01-02T00:00:00+00:00" in out


def test_json_is_ascii_and_exact(capsys: pytest.CaptureFixture[str]) -> None:
    emit_json([{"error": HOSTILE, "bidi": "\u2066\u2069"}])
    out, _ = capsys.readouterr()
    assert out.isascii() and "\\u202e" in out and "\\u001b" in out
    assert json.loads(out) == [{"error": HOSTILE, "bidi": "\u2066\u2069"}]


def test_a_document_keeps_its_lines_and_tabs_only(capsys: pytest.CaptureFixture[str]) -> None:
    emit_document(f"#!/bin/sh\n\techo {HOSTILE}\n")
    out, _ = capsys.readouterr()
    line_kept = SHOWN.replace(r"\r\n", "\\r\n")  # the newline stays a newline, CR is shown
    assert out == f"#!/bin/sh\n\techo {line_kept}\n"


def test_click_errors_and_progress_labels_are_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    echo_click_error(click.UsageError(f"bad tag {HOSTILE}"))
    _, err = capsys.readouterr()
    assert f"bad tag {SHOWN}" in err
    _no_raw(err)
    assert progress_label("img [bold]x\x1b") == "img \\[bold]x\\x1b"

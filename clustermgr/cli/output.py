"""Everything a command prints goes through here: tables and key/value records for people,
JSON for scripts, single lines, error lines and documents.

Most of what the CLI shows came from outside the code: a user's job name or a transfer's
error (cmsub writes it), a node's reason (Slurm, a cloud), a cloud's tags, an LDAP
attribute. Each text leaves here with its control characters (C0, DEL, C1 such as the
8-bit CSI), line separators and format characters (bidi overrides, zero-width ones)
shown as visible escapes (`\\x1b`, `\\n`, `\\u202e`, core.inputs.escape_controls), so a
value can neither drive the admin's terminal (a title, a clear screen, an OSC 52 clipboard
write) nor fake a line or reorder one; and rich reads none of it as markup (`[red]`,
`[link=...]` print as they are). JSON is ASCII: every such character a `\\u` escape.
tests/unit/test_output_layer.py holds every other module of the package to these functions.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from clustermgr.core.inputs import escape_controls
from clustermgr.core.logsafe import say

if TYPE_CHECKING:
    import click
    from rich.console import Console
    from rich.text import Text

_KEEP_IN_DOCUMENTS = ("\n", "\t")


def echo(line: str = "", *, err: bool = False) -> None:
    """One line (stderr with `err`), every unsafe character in it escaped: a newline in a
    value shows as `\\n` instead of starting a line of its own."""
    say(line, err=err)


def echo_error(prog: str, message: str) -> None:
    """`prog: error: message` on stderr, the way every failure ends a command."""
    say(f"{prog}: error: {message}", err=True)


def echo_traceback() -> None:
    """The exception being handled (--debug), each line of it escaped: its message may
    quote a value from outside."""
    for line in traceback.format_exc().rstrip("\n").split("\n"):
        say(line, err=True)


def echo_click_error(error: click.ClickException) -> None:
    """click's own usage and parameter errors (they may quote a value from a config file or
    an environment variable), escaped like every other line."""
    import io

    vars(error)["message"] = escape_controls(error.message)  # one line, whatever it quotes
    shown = io.StringIO()
    error.show(file=shown)
    for line in shown.getvalue().rstrip("\n").split("\n"):
        say(line, err=True)


def emit_document(text: str) -> None:
    """A multi-line document the code composed (a user-data script, a completion script),
    printed as it is to be saved: its own newlines and tabs kept, any other control or
    format character escaped."""
    shown = "".join(char if char in _KEEP_IN_DOCUMENTS else escape_controls(char) for char in text)
    sys.stdout.write(shown)
    sys.stdout.flush()


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def emit_json(rows: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> None:
    """Indented for a terminal; compact (and C-encoded, so fast) when piped. ASCII only:
    a control, bidi or zero-width character in a value is a `\\u` escape, never raw."""
    indent = 2 if sys.stdout.isatty() else None
    if isinstance(rows, Mapping):
        payload: Any = dict(rows)
    else:
        payload = [row if type(row) is dict else dict(row) for row in rows]
    sys.stdout.write(json.dumps(payload, indent=indent, default=_default, ensure_ascii=True))
    sys.stdout.write("\n")


def _console() -> Console:
    from rich.console import Console

    return Console(soft_wrap=False, width=max(120, Console().width))


def emit_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], title: str | None = None
) -> None:
    from rich.table import Table

    table = Table(title=_cell(title) if title else None, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.upper().replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(column)) for column in columns))
    if rows:
        _console().print(table)
    else:
        _console().print(_cell(f"no {title.lower() if title else 'rows'}"))


def emit_grid(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table of figures: labels in the first column, one right-aligned column per header
    after it (a strategy's name from the config is a header: text, not markup)."""
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    table.add_column("")
    for header in headers:
        table.add_column(_cell(header), justify="right")
    for row in rows:
        table.add_row(*(_cell(value) for value in row))
    _console().print(table)


def emit_fields(row: Mapping[str, Any], indent: str = "") -> None:
    """One record as aligned `key  value` lines (times in ISO 8601, empty as `-`)."""
    width = max(len(key) for key in row)
    for key, value in row.items():
        shown = value.isoformat() if isinstance(value, datetime) else value
        text = "-" if shown in (None, "") else str(shown)
        say(f"{indent}{key:<{width}}  {text}")


def progress_label(text: str) -> str:
    """A progress bar's label: rich reads a task's description as markup, so the names in
    it are escaped for markup as well as for the terminal."""
    from rich.markup import escape

    return escape(escape_controls(text))


def _cell(value: Any) -> Text:
    """A cell's text, never read as rich markup (a hostlist such as `gpu-[001-064]` is text,
    not a style); names and reasons from outside with their control characters escaped (an
    escape sequence in a spool file name must not drive the admin's terminal)."""
    from rich.text import Text

    if value is None:
        return Text("-")
    if isinstance(value, datetime):
        return Text(value.strftime("%Y-%m-%d %H:%M:%S"))
    if isinstance(value, list | tuple):
        return Text(escape_controls(",".join(str(v) for v in value)))
    return Text(escape_controls(str(value)))


def emit(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], as_json: bool, title: str
) -> None:
    if as_json:
        emit_json(rows)
    else:
        emit_table(rows, columns, title)

"""Tables for people, JSON for scripts: every listing command offers both."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from clustermgr.core.inputs import escape_controls

if TYPE_CHECKING:
    from rich.text import Text


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def emit_json(rows: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> None:
    """Indented for a terminal; compact (and C-encoded, so fast) when piped."""
    indent = 2 if sys.stdout.isatty() else None
    if isinstance(rows, Mapping):
        payload: Any = dict(rows)
    else:
        payload = [row if type(row) is dict else dict(row) for row in rows]
    sys.stdout.write(json.dumps(payload, indent=indent, default=_default))
    sys.stdout.write("\n")


def emit_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], title: str | None = None
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.upper().replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(column)) for column in columns))
    console = Console(soft_wrap=False, width=max(120, Console().width))
    if rows:
        console.print(table)
    else:
        console.print(f"no {title.lower() if title else 'rows'}")


def emit_fields(row: Mapping[str, Any]) -> None:
    """One record as aligned `key  value` lines (times in ISO 8601, empty as `-`)."""
    width = max(len(key) for key in row)
    for key, value in row.items():
        shown = value.isoformat() if isinstance(value, datetime) else value
        text = "-" if shown in (None, "") else escape_controls(str(shown))
        click.echo(f"{key:<{width}}  {text}")


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

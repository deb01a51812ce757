"""One log record, one line: the formatter cm-scale and the CLI log through; and `say`,
the one line a command prints for a person, made safe the same way.

A log message carries names that came from outside (spool file names, node names,
reasons, SDK messages); a newline or a Unicode line separator in one of them would print
a line of the attacker's choosing (`INFO cm-scale: cycle ...`). The formatter escapes
every control character of the message once, here, so no call site has to. A traceback
(`log.exception`, --debug) keeps its own lines, each indented and escaped, so a line that
starts at the left margin always begins a record.

`say` is the one way code below the CLI (cmsub-transfer's progress lines, the Slurm hooks'
warnings, the local boot script) prints to a terminal, and what `clustermgr.cli.output`
prints its lines through: a value from outside (a transfer's error, a node's reason, a
cloud's tag) holding an escape sequence or a bidi override is shown as `\\x1b`, `\\u202e`
instead of driving the reader's terminal or reordering the line.
"""

from __future__ import annotations

import logging
import sys

from clustermgr.core.inputs import escape_controls

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TRACE_INDENT = "  "


class OneLineFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: logging._SysExcInfoType) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    lines = text.split("\n")
    return "\n".join(TRACE_INDENT + escape_controls(line) for line in lines)


def configure(level: int) -> None:
    """The root logger writes one-line records to stderr (systemd's journal under the unit)."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])


def say(line: str, *, err: bool = False, flush: bool = False) -> None:
    """`line` on stdout (stderr with `err`) as one line: every control and format character
    in it escaped, a newline included, so the reader sees exactly one line of text."""
    print(escape_controls(line), file=sys.stderr if err else sys.stdout, flush=flush)

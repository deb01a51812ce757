"""What a burst node reports about itself: its image, the image's revision, its kernel.

`clustermgr health-check` (Slurm's HealthCheckProgram, run by slurmd as root on the node)
reads the image and revision from `/etc/clustermgr/node.env` (written by the image's
user-data at boot) and the running kernel (`uname -r`), and sets them as the node's Slurm
`Extra` field, a JSON object (`scontrol update nodename=N extra=...`, Slurm 22.05 and
later); cm-scale reads `extra` from `sinfo --json` with the rest of the node. Only this one
object of the Extra field is read, and only its three strings: each must match a strict
pattern here, or the report is skipped with a warning (the node is then judged as one that
reports nothing). Whether the revision is one the image has is checked against the
database where the cycle reads the images (`imaging.node_revisions`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

KEY = "clustermgr"  # the Extra object's key whose value is the report
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # an image definition's name
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # `r3-<12 hex>` (tree_manifest)
# `uname -r`: 6.1.0-13-amd64, 5.15.0-1051-aws, 4.18.0-513.5.1.el8_9.x86_64, 6.8.0+rpt-rpi-v8
KERNEL = re.compile(r"[0-9]+\.[0-9]+[A-Za-z0-9._+~-]{0,100}")
MAX_EXTRA = 4096  # a longer Extra field is not ours to parse


@dataclass(frozen=True)
class NodeReport:
    """A node's own account of what it runs (each field checked, "" when not reported)."""

    image: str = ""  # the image definition's name; "" when the node has no node.env
    revision: str = ""  # "" when the node booted before its director served a revision
    kernel: str = ""

    def as_extra(self, current: str = "") -> str:
        """The Extra field with this report: merged into `current` when that is a JSON
        object (another tool's keys are kept), else alone."""
        data = _object(current) or {}
        data[KEY] = {"image": self.image, "revision": self.revision, "kernel": self.kernel}
        return json.dumps(data, separators=(",", ":"), sort_keys=True)


def _object(text: str) -> dict[str, object] | None:
    if not text or len(text) > MAX_EXTRA:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse_extra(text: str) -> tuple[NodeReport | None, str | None]:
    """(the report in a node's Extra field, None) or (None, why it is not one). An Extra
    field without clustermgr's object is (None, None): the node reports nothing."""
    if not text:
        return None, None
    data = _object(text)
    if data is None or KEY not in data:
        return None, None
    raw = data[KEY]
    if not isinstance(raw, dict):
        return None, f"its {KEY!r} entry is not an object"
    values = {}
    for field, pattern, empty_ok in (
        ("image", NAME, True),  # "" from a node whose template names no image definition
        ("revision", REVISION, True),
        ("kernel", KERNEL, False),
    ):
        value = raw.get(field, "")
        if not isinstance(value, str):
            return None, f"{field} is not a string"
        if (value or not empty_ok) and not pattern.fullmatch(value):
            return None, f"{field} {value[:80]!r} does not look like one"
        values[field] = value
    return NodeReport(**values), None

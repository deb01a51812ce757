"""Node reasons: `(Code:KIND) detail`, formatted and parsed here and nowhere else.

Slurm shows the reason to users (`sinfo -R`, `scontrol show node`), so the kind leads the
text the way ParallelCluster's reasons do; the database keeps the kind in its own column
(node_events.reason_kind) so metrics and policies never parse text.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Kinds clustermgr itself sets (providers add the ErrorKind values: CAPACITY, QUOTA, ...).
BACKOFF = "BACKOFF"
BOOT_TIMEOUT = "BOOT_TIMEOUT"
DAEMON = "DAEMON"
HEALTH = "HEALTH"
# an image wait (a template's region has no usable machine image yet) or a node running an
# image revision its director no longer serves; never a failure kind (no protection count)
IMAGE = "IMAGE"
POWER = "POWER"  # an on-prem node not back within its boot timeout after a power on
PROTECTED = "PROTECTED"
REFUSED = "REFUSED"
RESUME_TIMEOUT = "RESUME_TIMEOUT"
VANISHED = "VANISHED"

# The drain clustermgr sets to hold a slot out of Slurm's scheduling: every such reason
# starts with HOLD_PREFIX (a drain set by anyone else does not).
HOLD_PREFIX = "clustermgr: "
HOLD_REASON = f"{HOLD_PREFIX}held until a policy launches it"

_CODED = re.compile(r"^\(Code:(?P<kind>[A-Z][A-Z0-9_]*)\)\s?(?P<detail>.*)$", re.DOTALL)
MAX_LENGTH = 200  # Slurm keeps reasons short; scontrol quoting limits us further anyway


class Reason(NamedTuple):  # a NamedTuple, not a dataclass: the Slurm hooks import this
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"(Code:{self.kind}) {self.detail}"[:MAX_LENGTH].rstrip()

    @classmethod
    def parse(cls, text: str | None) -> Reason | None:
        """The coded reason in `text`, or None for free text (an admin's own reason)."""
        found = _CODED.match((text or "").strip())
        if found is None:
            return None
        return cls(found["kind"], found["detail"].strip())


def kind_of(text: str | None) -> str | None:
    """The KIND of a `(Code:KIND) detail` text, None for any other text."""
    parsed = Reason.parse(text)
    return parsed.kind if parsed else None


def has_kind(text: str | None, kind: str) -> bool:
    return kind_of(text) == kind


def is_hold(text: str | None) -> bool:
    """A drain reason of clustermgr's hold. An empty one counts too: slurmctld clears a
    drained node's reason when it starts powering it up (as it does for a held node being
    launched), while a drain set by anyone else always carries a reason."""
    return not text or text.startswith(HOLD_PREFIX)

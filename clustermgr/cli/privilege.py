"""Verbs that change the cluster's state are root's: refused for anyone else before they
touch anything (docs/security.md, section state). The read-only verbs work for the group
`[daemon] admin_group` names, which may read the database."""

from __future__ import annotations

import os

from clustermgr.core.errors import UsageError


def require_root(verb: str) -> None:
    if os.geteuid() != 0:
        raise UsageError(
            f"`clustermgr {verb}` changes the cluster's state, which only root may do: "
            f"run it as root (sudo clustermgr {verb}); the read-only verbs need no root"
        )

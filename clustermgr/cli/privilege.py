"""Verbs that change the cluster's state are root's: refused for anyone else before they
touch anything (docs/security.md, section state). The read-only verbs work for the group
`[daemon] admin_group` names, which may read the database."""

from __future__ import annotations

import grp
import os
from typing import TYPE_CHECKING

from clustermgr.core.errors import UsageError

if TYPE_CHECKING:
    from clustermgr.cli.context import AppContext


def require_root(verb: str) -> None:
    if os.geteuid() != 0:
        raise UsageError(
            f"`clustermgr {verb}` changes the cluster's state, which only root may do: "
            f"run it as root (sudo clustermgr {verb}); the read-only verbs need no root"
        )


def reads_state(app: AppContext) -> tuple[bool, str]:
    """(may this user read cm-scale's state: root or a member of `[daemon] admin_group`,
    that group's name). A configuration the user cannot read names no group."""
    from clustermgr.core.errors import ClusterMgrError

    if os.geteuid() == 0:
        return True, ""
    try:
        group = app.settings().daemon.admin_group
    except ClusterMgrError:
        return False, ""
    if not group:
        return False, ""
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        return False, group
    return gid in (os.getegid(), *os.getgroups()), group

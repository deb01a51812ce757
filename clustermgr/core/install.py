"""Where the running clustermgr is installed: its console scripts' directory.

A site installs the wheel into a virtualenv (say /opt/clustermgr), so the programs Slurm and
the transfer jobs run (`clustermgr`, `clustermgr-health-check`, `cmsub-transfer`) live in
that virtualenv's `bin/`, not in /usr/local/bin. Defaults are taken from the install that
reads the configuration, so `clustermgr slurm conf` names programs that exist."""

from __future__ import annotations

import sysconfig
from pathlib import Path


def scripts_dir() -> Path:
    """The `bin/` of the environment this Python runs in (the virtualenv's, when in one)."""
    return Path(sysconfig.get_path("scripts"))


def installed_program(name: str) -> Path:
    return scripts_dir() / name

"""End-to-end fixtures: a real slurmctld, real slurmd burst nodes in network namespaces."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cannot_run


def _can_burst() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("slurmctld", "slurmd", "munged", "ip", "unshare", "nsenter"):
        if shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            return f"{tool} is not installed"
    return None


@pytest.fixture
def lab_dir() -> Iterator[Path]:
    """A world-traversable directory: hooks run as SlurmUser and must reach the config."""
    missing = _can_burst()
    if missing:
        cannot_run(f"end-to-end tests cannot run: {missing}")
    path = Path(tempfile.mkdtemp(prefix="cm-e2e-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        if not os.environ.get("CM_KEEP_LAB"):  # kept for a post-mortem when set
            shutil.rmtree(path, ignore_errors=True)


def slurm_user_for_hooks(python: str | None = None) -> str:
    """ "slurm" when that user can run this virtualenv's hooks (or those of the virtualenv of
    `python`): the realistic set-up; else "root" with a warning: an interpreter under a 0700
    home is out of SlurmUser's reach."""
    import subprocess
    import sys
    import warnings

    python = python or sys.executable
    probe = subprocess.run(
        ["runuser", "-u", "slurm", "--", python, "-c", "import clustermgr"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if probe.returncode == 0:
        return "slurm"
    warnings.warn(
        f"SlurmUser=slurm cannot run {python}; the hooks run as root instead "
        "(build the virtualenv from /usr/bin/python3, as `make` does)",
        stacklevel=2,
    )
    return "root"

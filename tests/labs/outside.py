"""The outside provider package (tests/fixtures/outside_provider), pip-installed the way a
site installs its own provider: into a directory that goes on PYTHONPATH."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).parents[1] / "fixtures" / "outside_provider"


def install_outside_provider(workdir: Path) -> Path:
    """pip-installs the fixture package into `<workdir>/site` (built from a copy, so the
    checkout gets no build/ or egg-info); returns the directory to put on PYTHONPATH."""
    source = workdir / "outside-src"
    shutil.copytree(FIXTURE, source)
    site = workdir / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
    subprocess.run([*pip, str(source)], check=True, capture_output=True, timeout=120)
    return site


def outside_toml(subnet: str, state_dir: Path) -> str:
    """The type and own keys of an `outside` [[providers]] entry."""
    return f'type = "outside"\nlab_subnet = "{subnet}"\nlab_state_dir = "{state_dir}"'

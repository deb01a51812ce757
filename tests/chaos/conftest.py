"""The crash campaign's labs: one per cloud, in a world-traversable directory under /tmp
(SlurmUser runs the hooks from it), everything they start stopped on exit."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cannot_run
from tests.e2e.conftest import _can_burst


@pytest.fixture
def chaos_dir() -> Iterator[Path]:
    missing = _can_burst()
    if missing:
        cannot_run(f"the crash campaign cannot run: {missing}")
    path = Path(tempfile.mkdtemp(prefix="cm-chaos-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        if not os.environ.get("CM_KEEP_LAB"):  # kept for a post-mortem when set
            shutil.rmtree(path, ignore_errors=True)

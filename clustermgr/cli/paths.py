"""Where things are, without importing anything heavy (the Slurm hooks start here)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_CONFIG_PATH = Path("/etc/clustermgr/clustermgr.toml")


def config_path(explicit: str | Path | None = None) -> Path:
    """--config, else $CLUSTERMGR_CONFIG, else /etc/clustermgr/clustermgr.toml."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("CLUSTERMGR_CONFIG")
    return Path(env) if env else DEFAULT_CONFIG_PATH

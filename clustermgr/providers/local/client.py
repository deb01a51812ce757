"""The local provider's "credentials" and plumbing handles: the right to manage network
namespaces (root or CAP_NET_ADMIN), its state dir, its bridge and the slurmd it runs."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from clustermgr.providers.local import net
from clustermgr.providers.local.errors import auth_error
from clustermgr.providers.local.kind import LocalOptions
from clustermgr.providers.local.state import check_state_dir

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

DEFAULT_STATE_ROOT = Path("/var/lib/clustermgr/local")
SLURMD = "/usr/sbin/slurmd"
CAP_NET_ADMIN = 12


def local_options(settings: ProviderSettings) -> LocalOptions:
    return settings.options_as(LocalOptions)


def state_dir_of(settings: ProviderSettings) -> Path:
    return local_options(settings).state_dir or DEFAULT_STATE_ROOT / settings.name


def ensure_bridge(settings: ProviderSettings) -> str:
    """Make the provider's bridge (idempotent) and return the host's address on it."""
    return net.ensure_bridge_for(net.Subnet.parse(local_options(settings).subnet))


def remove_bridge(settings: ProviderSettings) -> None:
    """Delete the provider's bridge; already gone is fine."""
    net.remove_bridge_for(net.Subnet.parse(local_options(settings).subnet))


def can_manage_namespaces() -> bool:
    """Root, or CAP_NET_ADMIN in the effective set."""
    if os.geteuid() == 0:
        return True
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    return False


def authorize(state_dir: Path) -> None:
    """AUTH unless this process may manage namespaces and use the state dir."""
    if not can_manage_namespaces():
        raise auth_error("cannot manage network namespaces: not root (needs CAP_NET_ADMIN)")
    check_state_dir(state_dir)


def slurmd_path() -> str:
    return SLURMD if os.path.exists(SLURMD) else (net.tool("slurmd") or SLURMD)

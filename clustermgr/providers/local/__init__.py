"""Local: each instance is a real slurmd in its own network namespace; see provider.py."""

from clustermgr.providers.local.client import ensure_bridge, remove_bridge
from clustermgr.providers.local.provider import LocalProvider
from clustermgr.providers.local.shapes import conf_server_from

__all__ = ["LocalProvider", "conf_server_from", "ensure_bridge", "remove_bridge"]

"""Render a burst node's user-data from images/bootstrap.sh.tmpl.

The same script serves every instance of a template (a fleet shares its user-data): the
node name is read at boot from the instance's own `clustermgr-node` tag (AWS/Azure
metadata, OpenStack metadata), or from CLUSTERMGR_NODE for the local provider.
"""

from __future__ import annotations

import importlib.resources
import string

from clustermgr.config import Settings, TemplateSettings
from clustermgr.providers.base import TAG_NODE

DEFAULT_MUNGE_KEY = "/etc/munge/munge.key"


class _Template(string.Template):
    delimiter = "@"


def conf_server(settings: Settings) -> str:
    return settings.slurm.conf_server or settings.cluster.head_address


def render_user_data(
    settings: Settings, template: TemplateSettings, controller_version: str = ""
) -> str:
    """The template's user-data; `controller_version` (slurmctld's) lets the node refuse
    to join with a newer slurmd than the controller's."""
    text = importlib.resources.files("clustermgr.images").joinpath("bootstrap.sh.tmpl").read_text()
    provider = settings.provider(template.provider)
    return _Template(text).substitute(
        cluster=settings.cluster.name,
        conf_server=conf_server(settings),
        provider_type=provider.type,
        node_tag=TAG_NODE,
        munge_key=settings.slurm.munge_key_path,
        slurmd=str(settings.slurm.sbin_dir / "slurmd"),
        controller_version=controller_version,
    )

"""Render a burst node's boot script from images/bootstrap.sh.tmpl.

The same script serves every instance of a template (a fleet shares its user-data): the
node name is read at boot from the instance's own `clustermgr-node` tag (AWS/Azure
metadata, OpenStack metadata), or from CLUSTERMGR_NODE for the local provider.

The image definitions (images/*.toml, clustermgr.imaging.definitions) embed this same
script in their cloud-init user-data, so a node boots the same way either way.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import string
from dataclasses import dataclass, field

from clustermgr.config import Settings, TemplateSettings
from clustermgr.providers.base import TAG_NODE

DEFAULT_MUNGE_KEY = "/etc/munge/munge.key"
BOOTSTRAP_TEMPLATE = "bootstrap.sh.tmpl"


class AtTemplate(string.Template):
    """`@{name}` placeholders: shell and cloud-init keep their own `$`."""

    delimiter = "@"


@dataclass(frozen=True)
class BootstrapFacts:
    """What the boot script needs to know about the cluster (never a secret)."""

    cluster: str
    conf_server: str  # HOST[:PORT] of slurmctld, for configless slurmd
    provider_type: str
    munge_key: str  # a path on the node; the key itself never travels in user-data
    slurmd: str
    controller_version: str = ""
    # where and how root's boot fetches the key (clustermgr.mungekey): the key server's
    # URL, its public-key pin and the launch request's one-time token (empty: no fetch)
    key_url: str = ""
    key_pin: str = ""
    key_token: str = field(default="", repr=False)


def conf_server(settings: Settings) -> str:
    return settings.slurm.conf_server or settings.cluster.head_address


def bootstrap_facts(
    settings: Settings, provider_type: str, controller_version: str = ""
) -> BootstrapFacts:
    return BootstrapFacts(
        cluster=settings.cluster.name,
        conf_server=conf_server(settings),
        provider_type=provider_type,
        munge_key=settings.slurm.munge_key_path,
        slurmd=str(settings.slurm.sbin_dir / "slurmd"),
        controller_version=controller_version,
    )


def render_bootstrap(facts: BootstrapFacts) -> str:
    text = importlib.resources.files("clustermgr.images").joinpath(BOOTSTRAP_TEMPLATE).read_text()
    return AtTemplate(text).substitute(dataclasses.asdict(facts), node_tag=TAG_NODE)


def render_user_data(
    settings: Settings,
    template: TemplateSettings,
    controller_version: str = "",
    key: KeyFetch | None = None,
) -> str:
    """The template's user-data; `controller_version` (slurmctld's) lets the node refuse
    to join with a newer slurmd than the controller's; `key`: the launch request's way to
    the munge key."""
    provider = settings.provider(template.provider)
    facts = bootstrap_facts(settings, provider.type, controller_version)
    if key is not None:
        facts = dataclasses.replace(facts, key_url=key.url, key_pin=key.pin, key_token=key.token)
    return render_bootstrap(facts)


@dataclass(frozen=True)
class KeyFetch:
    """The munge key server's URL and pin, and a launch request's one-time token."""

    url: str
    pin: str
    token: str = field(repr=False)

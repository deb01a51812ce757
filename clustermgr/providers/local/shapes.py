"""The local provider's fixed catalog and what it reads from a launch spec."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustermgr.providers.base import InstanceType, LaunchSpec, invalid
from clustermgr.providers.local.cloudinit import CLOUD_CONFIG, CloudConfig, parse

CONF_SERVER = re.compile(r"--conf-server[= ]+['\"]?([^'\"\s]+)")
# images/bootstrap.sh.tmpl's munge-key facts: KEY_URL='...' (each value quote-free)
KEY_FACT = re.compile(r"^(KEY_URL|KEY_PIN|KEY_TOKEN)='([^'\s]*)'$", re.MULTILINE)

CATALOG: tuple[InstanceType, ...] = (
    InstanceType("local.cpu", vcpus=2, memory_mb=1024),
    InstanceType("local.gpu2", vcpus=2, memory_mb=1024, gpu_model="fake", gpu_count=2),
    InstanceType("local.gpu8", vcpus=8, memory_mb=4096, gpu_model="fake", gpu_count=8),
)
CATALOG_BY_NAME = {t.name: t for t in CATALOG}


def conf_server_from(spec: LaunchSpec, script: str | None = None) -> str:
    found = CONF_SERVER.search(spec.user_data if script is None else script)
    if not found or found.group(1).startswith((":", "@")):
        raise invalid(
            "local",
            spec.template,
            "user_data",
            spec.user_data[:60],
            "has no `--conf-server HOST[:PORT]` for slurmd (set cluster.head_address)",
        )
    return found.group(1)


@dataclass(frozen=True)
class KeyFacts:
    """How the instance's boot fetches the munge key (the user-data's KEY_* lines)."""

    url: str
    pin: str
    token: str = field(repr=False)


def key_facts_from(spec: LaunchSpec, script: str | None = None) -> KeyFacts | None:
    """The munge key server's URL, pin and the request's token, when the user-data has
    them all (otherwise the instance uses this machine's munged, as a lab without a key
    server does)."""
    text = spec.user_data if script is None else script
    found = {m.group(1): m.group(2) for m in KEY_FACT.finditer(text)}
    url, pin, token = (found.get(k, "") for k in ("KEY_URL", "KEY_PIN", "KEY_TOKEN"))
    if not (url and pin and token):
        return None
    return KeyFacts(url, pin, token)


@dataclass(frozen=True)
class SlurmdBoot:
    """What a burst-node instance starts with: slurmd's conf server, and its way to the
    munge key (None: this machine's munged); or, for an image's cloud-config, the
    cloud-config the instance carries out (cloudinit.py), whose boot script starts slurmd."""

    conf_server: str
    key: KeyFacts | None = None
    user_data: str = field(default="", repr=False)
    cloud_config: CloudConfig | None = field(default=None, repr=False)


def slurmd_boot_from(spec: LaunchSpec) -> SlurmdBoot:
    """The boot of a burst node: the boot script itself (images/bootstrap.sh.tmpl), of
    which the provider runs only slurmd with its `--conf-server`, or an image's
    cloud-config (images/*.cloud-init.tmpl), which the instance carries out as written;
    its conf server is the one of the boot script among its `write_files`."""
    if not spec.user_data.startswith(CLOUD_CONFIG):
        return SlurmdBoot(conf_server_from(spec), key_facts_from(spec), spec.user_data)
    config = parse(spec)
    script = next((text for text in config.scripts() if CONF_SERVER.search(text)), "")
    return SlurmdBoot(
        conf_server_from(spec, script), key_facts_from(spec, script), spec.user_data, config
    )

"""The local provider's fixed catalog and what it reads from a launch spec."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clustermgr.providers.base import InstanceType, LaunchSpec, invalid

CONF_SERVER = re.compile(r"--conf-server[= ]+['\"]?([^'\"\s]+)")
# images/bootstrap.sh.tmpl's munge-key facts: KEY_URL='...' (each value quote-free)
KEY_FACT = re.compile(r"^(KEY_URL|KEY_PIN|KEY_TOKEN)='([^'\s]*)'$", re.MULTILINE)

CATALOG: tuple[InstanceType, ...] = (
    InstanceType("local.cpu", vcpus=2, memory_mb=1024),
    InstanceType("local.gpu2", vcpus=2, memory_mb=1024, gpu_model="fake", gpu_count=2),
    InstanceType("local.gpu8", vcpus=8, memory_mb=4096, gpu_model="fake", gpu_count=8),
)
CATALOG_BY_NAME = {t.name: t for t in CATALOG}


def conf_server_from(spec: LaunchSpec) -> str:
    found = CONF_SERVER.search(spec.user_data)
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


def key_facts_from(spec: LaunchSpec) -> KeyFacts | None:
    """The munge key server's URL, pin and the request's token, when the user-data has
    them all (otherwise the instance uses this machine's munged, as a lab without a key
    server does)."""
    found = {m.group(1): m.group(2) for m in KEY_FACT.finditer(spec.user_data)}
    url, pin, token = (found.get(k, "") for k in ("KEY_URL", "KEY_PIN", "KEY_TOKEN"))
    if not (url and pin and token):
        return None
    return KeyFacts(url, pin, token)


@dataclass(frozen=True)
class SlurmdBoot:
    """What a burst-node instance starts with: slurmd's conf server, and its way to the
    munge key (None: this machine's munged)."""

    conf_server: str
    key: KeyFacts | None = None
    user_data: str = field(default="", repr=False)


def slurmd_boot_from(spec: LaunchSpec) -> SlurmdBoot:
    return SlurmdBoot(conf_server_from(spec), key_facts_from(spec), spec.user_data)

"""The local provider's fixed catalog and what it reads from a launch spec."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

from clustermgr.providers.base import InstanceType, LaunchSpec, invalid

CONF_SERVER = re.compile(r"--conf-server[= ]+['\"]?([^'\"\s]+)")
# images/bootstrap.sh.tmpl's munge-key facts: KEY_URL='...' (each value quote-free)
KEY_FACT = re.compile(r"^(KEY_URL|KEY_PIN|KEY_TOKEN)='([^'\s]*)'$", re.MULTILINE)
CLOUD_CONFIG = "#cloud-config"
NODE_ENV_PATH = "/etc/clustermgr/node.env"  # what an image's user-data writes (images/)

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
    munge key (None: this machine's munged)."""

    conf_server: str
    key: KeyFacts | None = None
    user_data: str = field(default="", repr=False)
    node_env: str = ""  # the image's /etc/clustermgr/node.env (a cloud-config's), if any


def slurmd_boot_from(spec: LaunchSpec) -> SlurmdBoot:
    """The boot of a burst node: from the boot script itself (images/bootstrap.sh.tmpl),
    or from an image's cloud-config (images/*.cloud-init.tmpl): its node.env and the boot
    script among its `write_files`. Nothing else of a cloud-config is carried out."""
    if not spec.user_data.startswith(CLOUD_CONFIG):
        return SlurmdBoot(conf_server_from(spec), key_facts_from(spec), spec.user_data)
    files = _write_files(spec)
    node_env = files.pop(NODE_ENV_PATH, "")
    script = next((text for text in files.values() if CONF_SERVER.search(text)), "")
    return SlurmdBoot(
        conf_server_from(spec, script), key_facts_from(spec, script), spec.user_data, node_env
    )


def _write_files(spec: LaunchSpec) -> dict[str, str]:
    """path -> content of a cloud-config's `write_files` (b64 ones decoded); INVALID
    when it is not such a document."""
    try:
        import yaml  # type: ignore[import-untyped]  # PyYAML: a lab booting a cloud-config
    except ImportError:
        why = "a #cloud-config user-data needs PyYAML on this machine (pip install pyyaml)"
        raise invalid("local", spec.template, "user_data", CLOUD_CONFIG, why) from None
    try:
        data = yaml.safe_load(spec.user_data)
        entries = data.get("write_files") or [] if isinstance(data, dict) else []
        files = {}
        for entry in entries:
            content = str(entry.get("content") or "")
            if entry.get("encoding") in ("b64", "base64"):
                content = base64.b64decode(content, validate=True).decode()
            files[str(entry.get("path"))] = content
    except (yaml.YAMLError, AttributeError, binascii.Error, UnicodeDecodeError) as exc:
        why = f"is not a cloud-config with write_files: {type(exc).__name__}"
        raise invalid("local", spec.template, "user_data", CLOUD_CONFIG, why) from None
    return files

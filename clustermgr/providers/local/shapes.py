"""The local provider's fixed catalog and what it reads from a launch spec."""

from __future__ import annotations

import re

from clustermgr.providers.base import InstanceType, LaunchSpec, invalid

CONF_SERVER = re.compile(r"--conf-server[= ]+['\"]?([^'\"\s]+)")

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

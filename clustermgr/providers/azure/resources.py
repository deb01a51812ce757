"""Facts read off Azure SDK resources (ids, NICs, times) and the throwaway SSH key a VM
needs to be created: plain functions the provider uses."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any


def subnet_parts(subnet_id: str) -> tuple[str, str, str] | None:
    """(resource group, virtual network, subnet) of a subnet resource id."""
    segs = [s for s in subnet_id.split("/") if s]
    low = [s.lower() for s in segs]
    try:
        group = segs[low.index("resourcegroups") + 1]
        vnet = segs[low.index("virtualnetworks") + 1]
        subnet = segs[low.index("subnets") + 1]
    except (ValueError, IndexError):
        return None
    return group, vnet, subnet


def nic_refs(vm: Any) -> list[Any]:
    return list(getattr(getattr(vm, "network_profile", None), "network_interfaces", None) or [])


def id_name(resource_id: Any) -> str:
    """The name at the end of a resource id."""
    return str(resource_id).rstrip("/").rsplit("/", 1)[-1]


def private_ip(nic: Any) -> str | None:
    for config in getattr(nic, "ip_configurations", None) or []:
        if config.private_ip_address:
            return str(config.private_ip_address)
    return None


def enum_text(value: Any) -> str:
    """SDK enums are str subclasses; take their value."""
    return str(getattr(value, "value", value) or "")


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


@functools.cache
def throwaway_ssh_key() -> str:
    """One per process: an RSA public key whose private half is never kept."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode("ascii") + " clustermgr-no-login"

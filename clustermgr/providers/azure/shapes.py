"""Pure helpers of the Azure provider: resource names, ARM request bodies, SKU and state mapping.

Nothing here talks to Azure; bodies are plain ARM JSON (what the REST API documents), which
every azure-mgmt-compute / azure-mgmt-network release accepts as a model mapping.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clustermgr.providers.azure.infiniband import rdma_capable
from clustermgr.providers.azure.reservation_groups import vm_properties
from clustermgr.providers.base import TAG_NODE, InstanceState, InstanceType, LaunchSpec, ours

JSON = dict[str, Any]

ADMIN_USER = "clustermgr"
VM_NAME_MAX = 64  # Linux VM names and hostnames


@dataclass(frozen=True)
class Names:
    """The resources one node's VM consists of, derived from the VM name (its NICs are
    named per attempt: fresh_nic_name)."""

    vm: str
    os_disk: str
    computer: str


def names_for(cluster: str, node: str, request_id: str) -> Names:
    """Deterministic, valid Azure names for a node's VM (same inputs, same names).

    `<cluster>-<node>-<8 hex of sha256(cluster, node, request id)>`: a retry of the same
    request finds the same VM, while a later launch of the same node (new request id) gets a
    new name, so instance ids are never reused.
    """
    digest = hashlib.sha256(f"{cluster}\0{node}\0{request_id}".encode()).hexdigest()[:8]
    stem = _clean(f"{cluster}-{node}")[: VM_NAME_MAX - 9 - 8].strip("-.") or "node"
    vm = f"{stem}-{digest}"
    return Names(vm=vm, os_disk=f"{vm}-osdisk", computer=computer_name(node))


TAG_NIC_MADE = "clustermgr-nic-made"  # a NIC's creation time (epoch seconds): ARM keeps none


def fresh_nic_name(vm_name: str) -> str:
    """A new NIC name for one attempt at `vm_name`: a NIC of a failed VM stays reserved for
    it for 180 s (NicReservedForAnotherVm), so no attempt reuses another's NIC."""
    return f"{vm_name}-nic-{secrets.token_hex(3)}"


def nic_tags(tags: Mapping[str, str]) -> dict[str, str]:
    return {**tags, TAG_NIC_MADE: str(int(time.time()))}


def names_of(vm_name: str) -> Names:
    """The companion resource names of an existing VM we created."""
    return Names(vm_name, f"{vm_name}-osdisk", vm_name)


def computer_name(node: str) -> str:
    """A Linux hostname for the node: letters, digits and '-', at most 64 characters."""
    cleaned = re.sub(r"[^A-Za-z0-9-]", "-", node)[:VM_NAME_MAX].strip("-")
    return cleaned or "node"


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", text).lower()


def image_reference(image: str) -> JSON | None:
    """ARM imageReference for a template's `image`, or None when its form is not understood.

    Accepted: a marketplace URN `publisher:offer:sku:version` (version may be `latest`),
    a managed image id `/subscriptions/.../providers/Microsoft.Compute/images/NAME`, or a
    gallery image version id `/subscriptions/.../galleries/G/images/D/versions/V`.
    """
    if image.lower().startswith("/subscriptions/"):
        segs = [s.lower() for s in image.split("/") if s]
        if "galleries" in segs and len(segs) >= segs.index("galleries") + 6:
            return {"id": image}
        if len(segs) >= 8 and segs[6] == "images":
            return {"id": image}
        return None
    parts = image.split(":")
    if len(parts) == 4 and all(parts):
        publisher, offer, sku, version = parts
        return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}
    return None


def instance_tags(
    cluster: str, spec: LaunchSpec, request_id: str, node: str
) -> dict[str, str]:  # fmt: skip
    return {**ours(cluster, spec.template, request_id, spec.tags), TAG_NODE: node}


def nic_body(region: str, subnet_id: str, tags: Mapping[str, str], nsg: str | None) -> JSON:
    props: JSON = {
        "ipConfigurations": [
            {
                "name": "ipconfig1",
                "properties": {
                    "subnet": {"id": subnet_id},
                    "privateIPAllocationMethod": "Dynamic",
                    "primary": True,
                },
            }
        ]
    }
    if nsg:
        props["networkSecurityGroup"] = {"id": nsg}
    return {"location": region, "tags": dict(tags), "properties": props}


@dataclass(frozen=True)
class VmRequest:
    """Everything one VM PUT needs besides the spec."""

    region: str
    names: Names
    nic_id: str
    instance_type: str
    zone: str | None
    tags: Mapping[str, str]
    ssh_public_key: str


def vm_body(spec: LaunchSpec, req: VmRequest) -> JSON:
    image = image_reference(spec.image)
    props: JSON = {
        "hardwareProfile": {"vmSize": req.instance_type},
        "storageProfile": {
            "imageReference": image,
            "osDisk": {
                "name": req.names.os_disk,
                "createOption": "FromImage",
                "deleteOption": "Delete",
                "caching": "ReadWrite",
            },
        },
        "osProfile": _os_profile(spec, req),
        "networkProfile": {
            "networkInterfaces": [
                {"id": req.nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}
            ]
        },
    }
    if spec.root_volume_gb is not None:
        props["storageProfile"]["osDisk"]["diskSizeGB"] = spec.root_volume_gb
    if spec.user_data:
        props["userData"] = _b64(spec.user_data)
    if spec.market == "spot":
        props["priority"] = "Spot"
        props["evictionPolicy"] = "Delete"
        price = spec.max_spot_price if spec.max_spot_price is not None else -1
        props["billingProfile"] = {"maxPrice": price}
    if spec.placement_group:
        props["proximityPlacementGroup"] = {"id": spec.placement_group}
    props.update(vm_properties(spec))  # a capacity reservation group (azure/reservation_groups.py)
    body: JSON = {"location": req.region, "tags": dict(req.tags), "properties": props}
    if req.zone:
        body["zones"] = [req.zone]
    if spec.instance_profile:
        body["identity"] = {
            "type": "UserAssigned",
            "userAssignedIdentities": {spec.instance_profile: {}},
        }
    return body


def _os_profile(spec: LaunchSpec, req: VmRequest) -> JSON:
    profile: JSON = {
        "computerName": req.names.computer,
        "adminUsername": ADMIN_USER,
        "linuxConfiguration": {
            "disablePasswordAuthentication": True,
            "ssh": {
                "publicKeys": [
                    {
                        "path": f"/home/{ADMIN_USER}/.ssh/authorized_keys",
                        "keyData": req.ssh_public_key,
                    }
                ]
            },
        },
    }
    if spec.user_data:
        profile["customData"] = _b64(spec.user_data)
    return profile


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


# ----------------------------------------------------------------------------- catalog

GPU_MODELS: tuple[tuple[str, str, int], ...] = (
    # (pattern on size name or family, model, memory MiB per GPU); first match wins
    (r"H200", "h200", 143360),
    (r"H100", "h100", 81920),
    (r"MI300X", "mi300x", 196608),
    (r"A100_v4|amsr", "a100", 81920),
    (r"A100|NDASv4|ND\d+asr_v4", "a100", 40960),
    (r"NCSv3|NC\d+s_v3|NDSv2|ND40rs", "v100", 16384),
    (r"T4", "t4", 16384),
    (r"A10", "a10", 24576),
)


@dataclass(frozen=True)
class SkuFacts:
    """What a resource SKU's restrictions and capabilities allow in one region, for this
    subscription (the answer of `resource_skus.list` is per subscription)."""

    region_ok: bool  # no Location restriction for the region
    zones: frozenset[str]  # zones offered there and not restricted
    spot: bool  # capability LowPriorityCapable (Spot and low-priority VMs)
    rdma: bool = False  # capability RdmaEnabled / InfiniBandSupported (infiniband.py)

    def usable_zones(self, wanted: Sequence[str | None]) -> list[str | None]:
        """The zones of `wanted` this size can be placed in (None: regional, any zone)."""
        if not self.region_ok:
            return []
        return [z for z in wanted if z is None or z in self.zones]


def sku_facts(sku: Any, region: str) -> SkuFacts:
    """Restrictions (type Location or Zone, restrictionInfo.locations / .zones) and the
    LowPriorityCapable capability of a resource SKU, as ARM lists them."""
    region = region.lower()
    zones: set[str] = set()
    for info in getattr(sku, "location_info", None) or []:
        if str(getattr(info, "location", "")).lower() == region:
            zones |= {str(z) for z in getattr(info, "zones", None) or []}
    region_ok = True
    for rule in getattr(sku, "restrictions", None) or []:
        info = getattr(rule, "restriction_info", None)
        places = {str(x).lower() for x in getattr(info, "locations", None) or []}
        # `values` (the region again) is a dict method on the SDK's models: read the info only
        kind = str(getattr(getattr(rule, "type", ""), "value", getattr(rule, "type", ""))).lower()
        if region not in places:
            continue
        if kind == "location":
            region_ok = False
        elif kind == "zone":
            zones -= {str(z) for z in getattr(info, "zones", None) or []}
    spot = capabilities(sku).get("LowPriorityCapable", "False").lower() == "true"
    return SkuFacts(region_ok, frozenset(zones), spot, rdma_capable(capabilities(sku)))


def capabilities(sku: Any) -> dict[str, str]:
    return {str(c.name): str(c.value) for c in (getattr(sku, "capabilities", None) or [])}


def instance_type_of(sku: Any, region: str) -> InstanceType | None:
    """A resource SKU -> InstanceType; None for non-VM SKUs or other regions."""
    if str(getattr(sku, "resource_type", "")).lower() != "virtualmachines":
        return None
    locations = [str(x).lower() for x in (getattr(sku, "locations", None) or [])]
    if locations and region.lower() not in locations:
        return None
    caps = capabilities(sku)
    name = str(sku.name)
    gpus = int(float(caps.get("GPUs", "0") or 0))
    model, gpu_memory = gpu_model(name, str(getattr(sku, "family", "") or "")) if gpus else ("", 0)
    arch = "arm64" if caps.get("CpuArchitectureType", "").lower() == "arm64" else "x86_64"
    return InstanceType(
        name=name,
        vcpus=int(float(caps.get("vCPUs", "0") or 0)),
        memory_mb=int(float(caps.get("MemoryGB", "0") or 0) * 1024),
        gpu_model=model or None,
        gpu_count=gpus,
        gpu_memory_mb=gpu_memory * gpus,
        architecture=arch,
        fabrics=frozenset({"infiniband"} if rdma_capable(caps) else ()),
    )


def gpu_model(name: str, family: str) -> tuple[str, int]:
    """(model, MiB per GPU) from the size name or family; ("", 0) when unknown."""
    for pattern, model, memory in GPU_MODELS:
        if re.search(pattern, name, re.IGNORECASE) or re.search(pattern, family, re.IGNORECASE):
            return model, memory
    return "", 0


# ----------------------------------------------------------------------------- state

PROVISIONING_STATES = {
    "creating": InstanceState.PENDING,
    "updating": InstanceState.RUNNING,
    "migrating": InstanceState.RUNNING,
    "deleting": InstanceState.STOPPING,
    "failed": InstanceState.ERROR,
    "canceled": InstanceState.ERROR,
}
POWER_STATES = {
    "starting": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "deallocating": InstanceState.STOPPING,
    "stopped": InstanceState.TERMINATED,
    "deallocated": InstanceState.TERMINATED,
}


def instance_state(provisioning: str | None, statuses: Sequence[str]) -> InstanceState:
    """From the VM's provisioningState and its instance-view status codes (PowerState/...)."""
    prov = (provisioning or "").lower()
    if prov in PROVISIONING_STATES:
        return PROVISIONING_STATES[prov]
    for code in statuses:
        if code.lower().startswith("powerstate/"):
            return POWER_STATES.get(code.split("/", 1)[1].lower(), InstanceState.UNKNOWN)
    return InstanceState.RUNNING if prov == "succeeded" else InstanceState.UNKNOWN

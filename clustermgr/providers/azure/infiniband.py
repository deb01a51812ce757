"""InfiniBand for a template with `infiniband = true`.

The shapes, from the Azure REST reference:
- Resource Skus - List (`GET .../providers/Microsoft.Compute/skus`): a VM size's
  `capabilities[]` name/value pairs; the RDMA (InfiniBand) sizes (HB, HC, ND..r, H..r)
  carry `{"name": "RdmaEnabled", "value": "True"}` (`az vm list-skus` shows it), some
  listings `InfiniBandSupported`; a size with neither has no InfiniBand, so the launch is
  refused before any NIC or VM is made.
- Network Interfaces - Create Or Update: `properties.enableAcceleratedNetworking` (bool),
  the SR-IOV NIC the HPC images' IPoIB/Ethernet side expects, as CycleCloud's HPC node
  arrays set it.
- Virtual Machines - Create Or Update: `properties.proximityPlacementGroup.id`, which the
  template's placement_group gives (config check requires it with infiniband).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clustermgr.providers.base import LaunchSpec

RDMA_CAPABILITIES = ("RdmaEnabled", "InfiniBandSupported")


def rdma_capable(caps: Mapping[str, str]) -> bool:
    return any(caps.get(name, "False").lower() == "true" for name in RDMA_CAPABILITIES)


def with_accelerated_networking(body: dict[str, Any], spec: LaunchSpec) -> dict[str, Any]:
    if spec.fabric == "infiniband":
        body["properties"]["enableAcceleratedNetworking"] = True
    return body

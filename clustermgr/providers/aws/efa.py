"""EFA (Elastic Fabric Adapter) for a template with `efa = true`.

The shapes, from the EC2 API reference:
- RequestLaunchTemplateData.NetworkInterfaces[] (LaunchTemplateInstanceNetworkInterface-
  SpecificationRequest): `DeviceIndex`, `InterfaceType: "efa"`, `Groups` (security group
  ids), `DeleteOnTermination`. With network interfaces in the data, the security groups go
  in the interface, not in `SecurityGroupIds` (EC2 refuses both at once). CreateFleet's
  `Overrides[].SubnetId` then places the primary interface in a subnet, as AWS
  ParallelCluster's `Efa: Enabled` launches do.
- RunInstances (the fallback): with `NetworkInterfaces`, the subnet is the interface's
  `SubnetId`, never the request's own.
- DescribeInstanceTypes: `InstanceTypes[].NetworkInfo.EfaSupported` (bool) and
  `NetworkInfo.EfaInfo.MaximumEfaInterfaces`; a type without it cannot take an EFA
  interface, so the launch is refused before it is made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from clustermgr.providers.base import LaunchSpec

JSON = dict[str, Any]


def efa_interface(spec: LaunchSpec) -> JSON:
    interface: JSON = {"DeviceIndex": 0, "InterfaceType": "efa", "DeleteOnTermination": True}
    groups = [g for g in spec.security_groups if g.startswith("sg-")]
    if groups:
        interface["Groups"] = groups
    return interface


def with_efa(data: JSON, spec: LaunchSpec) -> JSON:
    """Launch-template data with its primary interface an EFA one (groups moved into it)."""
    if spec.fabric != "efa":
        return data
    data = {k: v for k, v in data.items() if k not in ("SecurityGroupIds", "SecurityGroups")}
    data["NetworkInterfaces"] = [efa_interface(spec)]
    return data


def efa_run_request(request: JSON, spec: LaunchSpec) -> JSON:
    """A RunInstances request whose subnet goes in the EFA interface."""
    if spec.fabric != "efa":
        return request
    interface = efa_interface(spec)
    subnet = request.pop("SubnetId", None)
    if subnet:
        interface["SubnetId"] = subnet
    return {**request, "NetworkInterfaces": [interface]}


def without_efa(instance_types: Iterable[Mapping[str, Any]]) -> list[str]:
    """The DescribeInstanceTypes items that cannot take an EFA interface."""
    return [
        str(t["InstanceType"])
        for t in instance_types
        if not (t.get("NetworkInfo") or {}).get("EfaSupported")
    ]

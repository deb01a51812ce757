"""Pure EC2 request and answer shapes for the AWS provider (no SDK calls here)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.aws.capacity_reservations import (
    capacity_type,
    on_demand_options,
    template_data,
)
from clustermgr.providers.aws.efa import efa_run_request, with_efa
from clustermgr.providers.aws.errors import kind_of
from clustermgr.providers.base import (
    TAG_NODE,
    CloudInstance,
    InstanceState,
    InstanceType,
    LaunchError,
    LaunchSpec,
)
from clustermgr.providers.skeleton import first_line

JSON = dict[str, Any]
MAX_TOKEN = 64  # EC2 ClientToken limit
_TOKEN_SAFE = re.compile(r"^[A-Za-z0-9._:-]+$")
_TEMPLATE_SAFE = re.compile(r"[^A-Za-z0-9().\-/_]")

STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.STOPPING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPING,  # not running, not gone: the reconciler decides
    "terminated": InstanceState.TERMINATED,
}
LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")


@dataclass(frozen=True)
class Launched:
    """One instance as a CreateFleet / RunInstances answer names it."""

    instance_id: str
    instance_type: str
    lifecycle: str
    zone: str | None
    subnet: str | None


# ---------------------------------------------------------------------------- names


def client_token(cluster: str, request_id: str, part: str) -> str:
    """A deterministic ClientToken per (cluster, request, batch/attempt), at most 64 chars."""
    readable = f"{cluster}.{request_id}.{part}"
    if len(readable) <= MAX_TOKEN and _TOKEN_SAFE.match(readable):
        return readable
    digest = hashlib.sha256(f"{cluster}\0{request_id}".encode()).hexdigest()
    return f"cm-{digest[: MAX_TOKEN - 4 - len(part)]}.{part}"


def launch_template_name(cluster: str, template: str) -> str:
    name = _TEMPLATE_SAFE.sub("-", f"clustermgr-{cluster}-{template}")
    if len(name) <= 128:
        return name
    return f"{name[:111]}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def tag_list(tags: Mapping[str, str]) -> list[JSON]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tags_of(item: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in item.get("Tags") or ()}


# ---------------------------------------------------------------------------- launch template


def launch_template_data(spec: LaunchSpec, root_device: str | None = None) -> JSON:
    """What the launch template holds: everything that does not vary per launch.
    `root_device`: the image's root device name, for a root volume size."""
    data: JSON = {
        "ImageId": spec.image,
        # HttpTokens required (IMDSv2); InstanceMetadataTags so the node reads its name tag
        "MetadataOptions": {
            "HttpEndpoint": "enabled",
            "HttpTokens": "required",
            "InstanceMetadataTags": "enabled",
        },
    }
    if spec.user_data:
        data["UserData"] = base64.b64encode(spec.user_data.encode()).decode("ascii")
    groups = list(spec.security_groups)
    if groups and all(g.startswith("sg-") for g in groups):
        data["SecurityGroupIds"] = groups
    elif groups:
        data["SecurityGroups"] = groups
    if spec.instance_profile:
        key = "Arn" if spec.instance_profile.startswith("arn:") else "Name"
        data["IamInstanceProfile"] = {key: spec.instance_profile}
    if spec.key_name:
        data["KeyName"] = spec.key_name
    if spec.placement_group:
        data["Placement"] = {"GroupName": spec.placement_group}
    if spec.root_volume_gb is not None and root_device:
        # only the size: the snapshot and volume type stay the image's own
        ebs = {"VolumeSize": spec.root_volume_gb, "DeleteOnTermination": True}
        data["BlockDeviceMappings"] = [{"DeviceName": root_device, "Ebs": ebs}]
    data.update(template_data(spec))  # reserved capacity (aws/capacity_reservations.py)
    return with_efa(data, spec)


def root_device(image: Mapping[str, Any]) -> tuple[str, str, int]:
    """(root device name, root device type, the root snapshot's size in GB or 0) of one
    DescribeImages item."""
    name = str(image.get("RootDeviceName") or "")
    kind = str(image.get("RootDeviceType") or "ebs")
    for mapping in image.get("BlockDeviceMappings") or ():
        if mapping.get("DeviceName") == name:
            return name, kind, int((mapping.get("Ebs") or {}).get("VolumeSize") or 0)
    return name, kind, 0


def content_digest(data: Mapping[str, Any]) -> str:
    """Kept as the version description: a changed template content makes a new version."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "clustermgr:" + hashlib.sha256(text.encode()).hexdigest()[:40]


# ---------------------------------------------------------------------------- fleet


def placements(spec: LaunchSpec) -> list[JSON]:
    """Where an instance may go: each subnet, else each zone, else anywhere."""
    if spec.subnets:
        return [{"SubnetId": s} for s in spec.subnets]
    if spec.zones:
        return [{"AvailabilityZone": z} for z in spec.zones]
    return [{}]


def fleet_overrides(spec: LaunchSpec) -> list[JSON]:
    """Every instance type x subnet (or zone); the type order is the preference order."""
    overrides: list[JSON] = []
    for rank, itype in enumerate(spec.instance_types):
        for place in placements(spec):
            override: JSON = {"InstanceType": itype, **place, "Priority": float(rank)}
            if spec.market == "spot" and spec.max_spot_price is not None:
                override["MaxPrice"] = _price(spec.max_spot_price)
            overrides.append(override)
    return overrides


def fleet_request(
    spec: LaunchSpec, template: str, version: int, count: int, token: str, tags: Mapping[str, str]
) -> JSON:
    request: JSON = {
        "Type": "instant",
        "ClientToken": token,
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": template,
                    "Version": str(version),
                },
                "Overrides": fleet_overrides(spec),
            }
        ],
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": count,
            "DefaultTargetCapacityType": capacity_type(spec),
        },
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_list(tags)}],
    }
    if spec.market == "spot":
        request["SpotOptions"] = {"AllocationStrategy": "capacity-optimized-prioritized"}
    else:
        request["OnDemandOptions"] = on_demand_options(spec)
    return request


def fleet_launched(answer: Mapping[str, Any]) -> list[Launched]:
    found: list[Launched] = []
    for item in answer.get("Instances") or ():
        override = (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        for iid in item.get("InstanceIds") or ():
            found.append(
                Launched(
                    instance_id=str(iid),
                    instance_type=str(item.get("InstanceType") or override.get("InstanceType")),
                    lifecycle="spot" if item.get("Lifecycle") == "spot" else "on-demand",
                    zone=override.get("AvailabilityZone"),
                    subnet=override.get("SubnetId"),
                )
            )
    return found


def fleet_errors(answer: Mapping[str, Any], shortfall: int) -> list[LaunchError]:
    """CreateFleet `Errors` as LaunchErrors. The first carries the batch's shortfall as its
    count (the others 0), so counts add up to the instances missing."""
    errors: list[LaunchError] = []
    for item in answer.get("Errors") or ():
        override = (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
        code = str(item.get("ErrorCode") or "Unknown")
        message = first_line(str(item.get("ErrorMessage") or code))
        if override.get("SubnetId"):
            message = f"{message} (subnet {override['SubnetId']})"
        errors.append(
            LaunchError(
                kind=kind_of(code),
                code=code,
                message=message,
                instance_type=override.get("InstanceType"),
                zone=override.get("AvailabilityZone"),
                count=0 if errors else shortfall,
            )
        )
    if shortfall and not errors:
        message = f"the fleet started {shortfall} fewer instances than asked, with no error"
        errors.append(LaunchError(ErrorKind.OTHER, "FleetShortfall", message, count=shortfall))
    return errors


# ---------------------------------------------------------------------------- RunInstances


def run_request(
    spec: LaunchSpec,
    template: str,
    version: int,
    itype: str,
    place: Mapping[str, str],
    count: int,
    token: str,
    tags: Mapping[str, str],
) -> JSON:
    """RunInstances for one type in one subnet/zone: at least 1, at most `count`."""
    request: JSON = {
        "LaunchTemplate": {"LaunchTemplateName": template, "Version": str(version)},
        "InstanceType": itype,
        "MinCount": 1,
        "MaxCount": count,
        "ClientToken": token,
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_list(tags)}],
    }
    if "SubnetId" in place:
        request["SubnetId"] = place["SubnetId"]
    if "AvailabilityZone" in place:
        request["Placement"] = {"AvailabilityZone": place["AvailabilityZone"]}
    if spec.market == "spot":
        options: JSON = {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        }
        if spec.max_spot_price is not None:
            options["MaxPrice"] = _price(spec.max_spot_price)
        request["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
    return efa_run_request(request, spec)


def run_launched(answer: Mapping[str, Any]) -> list[Launched]:
    return [
        Launched(
            instance_id=str(inst["InstanceId"]),
            instance_type=str(inst.get("InstanceType", "")),
            lifecycle="spot" if inst.get("InstanceLifecycle") == "spot" else "on-demand",
            zone=(inst.get("Placement") or {}).get("AvailabilityZone"),
            subnet=inst.get("SubnetId"),
        )
        for inst in answer.get("Instances") or ()
    ]


# ---------------------------------------------------------------------------- answers


def to_instance(item: Mapping[str, Any]) -> CloudInstance:
    """One DescribeInstances item -> CloudInstance (node name from our node tag)."""
    tags = {t["Key"]: t.get("Value", "") for t in item.get("Tags") or ()}
    launched = item.get("LaunchTime")
    return CloudInstance(
        instance_id=item["InstanceId"],
        node_name=tags.get(TAG_NODE),
        state=STATES.get((item.get("State") or {}).get("Name", ""), InstanceState.UNKNOWN),
        private_address=item.get("PrivateIpAddress"),
        instance_type=item.get("InstanceType", ""),
        zone=(item.get("Placement") or {}).get("AvailabilityZone"),
        lifecycle="spot" if item.get("InstanceLifecycle") == "spot" else "on-demand",
        launch_time=launched if isinstance(launched, datetime) else None,
        tags=tags,
    )


def from_launch(launched: Launched, tags: Mapping[str, str]) -> CloudInstance:
    """When DescribeInstances does not show an instance yet (eventual consistency)."""
    return CloudInstance(
        instance_id=launched.instance_id,
        node_name=tags.get(TAG_NODE),
        state=InstanceState.PENDING,
        private_address=None,
        instance_type=launched.instance_type,
        zone=launched.zone,
        lifecycle="spot" if launched.lifecycle == "spot" else "on-demand",
        launch_time=None,
        tags=dict(tags),
    )


def to_instance_type(item: Mapping[str, Any]) -> InstanceType:
    gpu = item.get("GpuInfo") or {}
    gpus: Sequence[Mapping[str, Any]] = gpu.get("Gpus") or ()
    first = gpus[0] if gpus else {}
    archs = (item.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ["x86_64"]
    return InstanceType(
        name=str(item["InstanceType"]),
        vcpus=int((item.get("VCpuInfo") or {}).get("DefaultVCpus", 0)),
        memory_mb=int((item.get("MemoryInfo") or {}).get("SizeInMiB", 0)),
        gpu_model=str(first["Name"]).lower() if first.get("Name") else None,
        gpu_count=sum(int(g.get("Count", 0)) for g in gpus),
        gpu_memory_mb=int((first.get("MemoryInfo") or {}).get("SizeInMiB", 0)),
        architecture=str(archs[0]),
        fabrics=frozenset({"efa"} if (item.get("NetworkInfo") or {}).get("EfaSupported") else ()),
    )


def _price(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")

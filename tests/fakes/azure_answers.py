"""The answers the Azure fake (azure_fake.py) gives, in the shapes the real service sends,
each with where it was seen: VM creation refusals (`SHAPES`) and the resource SKU listing
(`DEFAULT_SKUS`). tests/unit/test_cloud_error_shapes.py feeds the same bodies, raised the
way the SDK raises them, to the provider's classifier.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

SUBSCRIPTION = "00000000-0000-0000-0000-0000000000aa"
LOCATION = "eastus"


def _sku(
    name: str,
    vcpus: int,
    memory_gb: float,
    gpus: int,
    family: str,
    spot: bool = True,
    restrictions: list[JSON] | None = None,
    rdma: bool = False,
) -> JSON:
    """A resource SKU as `GET .../providers/Microsoft.Compute/skus` lists it for one
    subscription: capabilities (LowPriorityCapable: spot allowed), the zones it is offered
    in, and the restrictions of this subscription (the ResourceSku model of
    azure-mgmt-compute; restriction bodies as quoted in MicrosoftDocs/SupportArticles-docs'
    "SkuNotAvailable" troubleshooting and the karpenter-provider-azure SKU handling)."""
    caps = [
        {"name": "vCPUs", "value": str(vcpus)},
        {"name": "MemoryGB", "value": f"{memory_gb:g}"},
        {"name": "CpuArchitectureType", "value": "x64"},
        {"name": "LowPriorityCapable", "value": "True" if spot else "False"},
    ]
    if gpus:
        caps.append({"name": "GPUs", "value": str(gpus)})
    if rdma:  # the InfiniBand sizes' capability, as `az vm list-skus` shows HB/ND..r sizes
        caps.append({"name": "RdmaEnabled", "value": "True"})
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "size": name.removeprefix("Standard_"),
        "family": family,
        "locations": [LOCATION],
        "locationInfo": [{"location": LOCATION, "zones": ["1", "2", "3"]}],
        "capabilities": caps,
        "restrictions": restrictions or [],
    }


def _restricted(kind: str, zones: list[str] | None = None) -> JSON:
    """A restriction of this subscription: the size is not offered in the region
    ("Location") or in these zones of it ("Zone")."""
    info: JSON = {"locations": [LOCATION]}
    if zones:
        info["zones"] = zones
    return {
        "type": kind,
        "values": [LOCATION],
        "restrictionInfo": info,
        "reasonCode": "NotAvailableForSubscription",
    }


DEFAULT_SKUS: list[JSON] = [
    _sku("Standard_D2s_v3", 2, 8, 0, "standardDSv3Family"),
    _sku("Standard_D4s_v3", 4, 16, 0, "standardDSv3Family"),
    _sku("Standard_NC24ads_A100_v4", 24, 220, 1, "StandardNCADSA100v4Family"),
    _sku("Standard_ND96asr_v4", 96, 900, 8, "standardNDASv4_A100Family", rdma=True),
    _sku(
        "Standard_ND96isr_H100_v5",
        96,
        1900,
        8,
        "standardNDSH100v5Family",
        restrictions=[_restricted("Zone", ["3"])],
    ),
    _sku("Standard_HB120rs_v3", 120, 448, 0, "standardHBrsv3Family", spot=False, rdma=True),
    _sku(
        "Standard_ND40rs_v2",
        40,
        672,
        8,
        "standardNDSv2Family",
        restrictions=[_restricted("Location")],
    ),
    {  # not a VM size: the provider must skip it
        "resourceType": "disks",
        "name": "Premium_LRS",
        "tier": "Premium",
        "locations": [LOCATION],
        "capabilities": [],
        "restrictions": [],
    },
]


@dataclass(frozen=True)
class Shape:
    """One way Azure refuses a VM creation: HTTP status (200: the PUT is accepted and its
    long-running operation ends Failed with this error), code, message, more of the error."""

    status: int
    code: str
    message: str
    extra: JSON = field(default_factory=dict)


_ALLOCATION = (
    "Allocation failed. We do not have sufficient capacity for the requested VM size in this "
    "region. Read more about improving likelihood of allocation success at "
    "http://aka.ms/allocation-guidance"
)
_ZONAL = (
    "Allocation failed. We do not have sufficient capacity for the requested VM size in this "
    "zone. Read more about improving likelihood of allocation success at "
    "http://aka.ms/allocation-guidance"
)
_QUOTA = (
    "Operation could not be completed as it results in exceeding approved {quota} quota. "
    "Additional details - Deployment Model: Resource Manager, Location: " + LOCATION + ", "
    "Current Limit: 10, Current Usage: 8, Additional Required: 4, (Minimum) New Limit "
    "Required: 12. Submit a request for Quota increase at https://aka.ms/ProdportalCRP"
)
# The same refusal with the real numbers (the fake's core quotas: azure_fake.limit_cores)
QUOTA_REFUSAL = (
    "Operation could not be completed as it results in exceeding approved {quota} quota. "
    "Additional details - Deployment Model: Resource Manager, Location: " + LOCATION + ", "
    "Current Limit: {limit}, Current Usage: {used}, Additional Required: {wanted}, (Minimum) "
    "New Limit Required: {needed}. Submit a request for Quota increase at "
    "https://aka.ms/ProdportalCRP"
)
_TERMINAL = "The resource operation completed with terminal provisioning state 'Failed'."


def _wrapped(code: str, message: str) -> Shape:
    return Shape(
        200,
        "ResourceOperationFailure",
        _TERMINAL,
        {"details": [{"code": code, "message": message}]},
    )


SHAPES: dict[str, Shape] = {
    # top level in the operation's final status: openshift/release#5181 (a Terraform log of
    # ZonalAllocationFailed), karpenter-provider-azure
    # pkg/providers/instance/offerings/errordetailhandlers_test.go (both messages)
    "AllocationFailed": Shape(200, "AllocationFailed", _ALLOCATION),
    "ZonalAllocationFailed": Shape(200, "ZonalAllocationFailed", _ZONAL),
    "OverconstrainedAllocationRequest": Shape(
        200,
        "OverconstrainedAllocationRequest",
        "Allocation failed. VM(s) with the following constraints cannot be allocated across "
        "all zones, because the condition is too restrictive.",
    ),
    # wrapped: MicrosoftDocs/azure-docs#41402 (ResourceOperationFailure around
    # ZonalAllocationFailed, quoted by a Microsoft engineer), Azure/azure-cli#2401 (the same
    # envelope around AllocationFailed in an operation's {"status": "Failed", "error": ...})
    "WrappedAllocationFailed": _wrapped("AllocationFailed", _ALLOCATION),
    "WrappedZonalAllocationFailed": _wrapped("ZonalAllocationFailed", _ZONAL),
    # karpenter-provider-azure errordetailhandlers_test.go ("Following SKUs have failed for
    # Capacity Restrictions"), MicrosoftDocs/azure-docs#55435 (a Spot VM refused this way)
    "SkuNotAvailable": Shape(
        409,
        "SkuNotAvailable",
        "The requested VM size for resource 'Following SKUs have failed for Capacity "
        "Restrictions: Standard_NC24ads_A100_v4' is currently not available in location '"
        + LOCATION
        + "'. Please try another size or deploy to a different location or different zone. "
        "See https://aka.ms/azureskunotavailable for details.",
    ),
    # quota: 409 OperationNotAllowed naming the quota, no additionalInfo: nforgeio/neonKUBE#1671
    # (Total Regional Cores, "Status: 409 (Conflict) ErrorCode: OperationNotAllowed"),
    # errordetailhandlers_test.go (Family Cores, LowPriorityCores),
    # scylladb/scylla-cluster-tests#4994 (LowPriorityCores, spot)
    "OperationNotAllowed": Shape(
        409, "OperationNotAllowed", _QUOTA.format(quota="Total Regional Cores")
    ),
    "FamilyCoresQuota": Shape(
        409, "OperationNotAllowed", _QUOTA.format(quota="standardNDASv4_A100Family Cores")
    ),
    "LowPriorityCores": Shape(409, "OperationNotAllowed", _QUOTA.format(quota="LowPriorityCores")),
    # Compute's throttling: MicrosoftDocs/azure-docs
    # articles/virtual-machines/troubleshooting/troubleshooting-throttling-errors.md
    "TooManyRequests": Shape(
        429,
        "OperationNotAllowed",
        "The server rejected the request because too many requests have been received for "
        "this subscription.",
        {
            "details": [
                {
                    "code": "TooManyRequests",
                    "target": "PutVM3Min",
                    "message": '{"operationGroup":"PutVM3Min","startTime":"2026-11-25T19:54:21'
                    '+00:00","endTime":"2026-11-25T19:57:21+00:00","allowedRequestCount":'
                    '240,"measuredRequestCount":262}',
                }
            ]
        },
    ),
    # ARM's own throttling: MicrosoftDocs/azure-docs#105248
    "SubscriptionRequestsThrottled": Shape(
        429,
        "SubscriptionRequestsThrottled",
        "Number of requests for subscription '" + SUBSCRIPTION + "' and operation 'PUT/"
        "SUBSCRIPTIONS/RESOURCEGROUPS/PROVIDERS/MICROSOFT.COMPUTE/VIRTUALMACHINES' exceeded "
        "the backend storage limit. Please try again after '6' seconds.",
    ),
    "Conflict": Shape(409, "Conflict", "Another operation on this resource is in progress."),
}

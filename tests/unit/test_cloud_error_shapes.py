"""Real answers of Azure and Nova (trimmed to the fields that matter), raised through each
SDK's own exception machinery, into each provider's classifier: the kind each must be.

Azure: a direct answer is raised as the generated clients raise it,
`HttpResponseError(response=..., error_format=ARMErrorFormat)` on azure-core's own
`RequestsTransportResponse`; a long-running operation that ends Failed as azure-core's
`LROBasePolling.run` raises it, `HttpResponseError(response=<the final poll>,
error=OperationFailed(...))`. OpenStack: `openstack.exceptions.raise_from_response` on a
`requests.Response` (what the SDK does with every answer), and a server's `fault` read
through openstacksdk's `Server` resource. Each row names where the body was seen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.core.pipeline.transport import RequestsTransportResponse
from azure.core.polling.base_polling import OperationFailed
from azure.core.rest import HttpRequest
from azure.mgmt.core.exceptions import ARMErrorFormat
from openstack import exceptions as sdk
from openstack.compute.v2.server import Server

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.azure.errors import classify as classify_azure
from clustermgr.providers.openstack.errors import classify as classify_openstack
from clustermgr.providers.openstack.errors import fault_failure

pytestmark = pytest.mark.unit

ARM = "https://management.azure.com/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute"
QUOTA = (
    "Operation could not be completed as it results in exceeding approved {} quota. "
    "Additional details - Deployment Model: Resource Manager, Location: eastus, Current "
    "Limit: 10, Current Usage: 8, Additional Required: 4, (Minimum) New Limit Required: 12."
)
ZONAL = (
    "Allocation failed. We do not have sufficient capacity for the requested VM size in this "
    "zone. Read more about improving likelihood of allocation success at "
    "http://aka.ms/allocation-guidance"
)
TERMINAL = "The resource operation completed with terminal provisioning state 'Failed'."


@dataclass(frozen=True)
class ArmRow:
    source: str
    status: int  # 200: the final status of a long-running operation
    error: dict[str, Any]
    kind: ErrorKind
    code: str  # the code the failure reports


def error(code: str, message: str, *details: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = list(details)
    return body


ARM_ROWS = [
    ArmRow(
        "MicrosoftDocs/azure-docs articles/virtual-machines/troubleshooting/"
        "troubleshooting-throttling-errors.md (Compute throttling; often no Retry-After)",
        429,
        error(
            "OperationNotAllowed",
            "The server rejected the request because too many requests have been received "
            "for this subscription.",
            {"code": "TooManyRequests", "target": "HighCostGet30Min", "message": "{}"},
        ),
        ErrorKind.THROTTLED,
        "OperationNotAllowed",
    ),
    ArmRow(
        "MicrosoftDocs/azure-docs#105248 (ARM's own throttling)",
        429,
        error(
            "SubscriptionRequestsThrottled",
            "Number of requests for subscription 'subid' and operation 'POST/SUBSCRIPTIONS/"
            "RESOURCEGROUPS/PROVIDERS/MICROSOFT.COMPUTE/VIRTUALMACHINES/START' exceeded the "
            "backend storage limit. Please try again after '6' seconds.",
        ),
        ErrorKind.THROTTLED,
        "SubscriptionRequestsThrottled",
    ),
    ArmRow(
        "nforgeio/neonKUBE#1671 (409 OperationNotAllowed, Total Regional Cores)",
        409,
        error("OperationNotAllowed", QUOTA.format("Total Regional Cores")),
        ErrorKind.QUOTA,
        "OperationNotAllowed",
    ),
    ArmRow(
        "Azure/karpenter-provider-azure pkg/providers/instance/offerings/"
        "errordetailhandlers_test.go (a family's cores)",
        409,
        error("OperationNotAllowed", QUOTA.format("standardNDASv4Family Cores")),
        ErrorKind.QUOTA,
        "OperationNotAllowed",
    ),
    ArmRow(
        "scylladb/scylla-cluster-tests#4994 (spot: LowPriorityCores)",
        409,
        error("OperationNotAllowed", QUOTA.format("LowPriorityCores")),
        ErrorKind.QUOTA,
        "OperationNotAllowed",
    ),
    ArmRow(
        "Azure/karpenter-provider-azure errordetailhandlers_test.go (top-level, in the "
        "operation's final status)",
        200,
        error("ZonalAllocationFailed", ZONAL),
        ErrorKind.CAPACITY,
        "ZonalAllocationFailed",
    ),
    ArmRow(
        "MicrosoftDocs/azure-docs#41402 (wrapped: ResourceOperationFailure)",
        200,
        error("ResourceOperationFailure", TERMINAL, error("ZonalAllocationFailed", ZONAL)),
        ErrorKind.CAPACITY,
        "ZonalAllocationFailed",
    ),
    ArmRow(
        "Azure/azure-cli#2401 (wrapped: ResourceDeploymentFailure around AllocationFailed)",
        200,
        error(
            "ResourceDeploymentFailure",
            TERMINAL,
            error("AllocationFailed", "Allocation failed. Please try reducing the VM size."),
        ),
        ErrorKind.CAPACITY,
        "AllocationFailed",
    ),
    ArmRow(
        "Azure/karpenter-provider-azure errordetailhandlers_test.go (SkuNotAvailable)",
        409,
        error(
            "SkuNotAvailable",
            "The requested VM size for resource 'Following SKUs have failed for Capacity "
            "Restrictions: Standard_D2s_v3' is currently not available in location 'eastus'.",
        ),
        ErrorKind.CAPACITY,
        "SkuNotAvailable",
    ),
    ArmRow(
        "a terraform destroy log (NIC DELETE, 400) and DataBiosphere/terra-workspace-manager's "
        "Azure VM step (VM PUT): NicReservedForAnotherVm",
        400,
        error(
            "NicReservedForAnotherVm",
            "Nic(s) in request is reserved for another Virtual Machine for 180 seconds. "
            "Please provide another nic(s) or retry after 180 seconds. Reserved VM: "
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm1",
        ),
        ErrorKind.TRANSIENT,
        "NicReservedForAnotherVm",
    ),
    ArmRow(
        "the Compute refusal that is neither quota nor throttling (changing a VM being deleted)",
        409,
        error(
            "OperationNotAllowed",
            "Operation 'put' is not allowed on VM 'vm1' since the VM "
            "is marked for deletion. You can only retry the Delete operation (or wait for an "
            "ongoing one to complete).",
        ),
        ErrorKind.OTHER,
        "OperationNotAllowed",
    ),
]


def arm_exception(row: ArmRow) -> HttpResponseError:
    raw = requests.Response()
    raw.status_code = row.status
    raw.reason = "Failed" if row.status != 200 else "OK"
    raw.headers["Content-Type"] = "application/json; charset=utf-8"
    if row.status == 200:  # the last poll of Azure-AsyncOperation
        body: dict[str, Any] = {"name": "op", "status": "Failed", "error": row.error}
        raw._content = json.dumps(body).encode()
        response = RequestsTransportResponse(HttpRequest("GET", f"{ARM}/operations/op"), raw)
        return HttpResponseError(
            response=response, error=OperationFailed("Operation failed or canceled")
        )
    raw._content = json.dumps({"error": row.error}).encode()
    response = RequestsTransportResponse(HttpRequest("PUT", f"{ARM}/virtualMachines/vm1"), raw)
    return HttpResponseError(response=response, error_format=ARMErrorFormat)


@pytest.mark.parametrize("row", ARM_ROWS, ids=[r.error["code"] + str(r.status) for r in ARM_ROWS])
def test_azure_real_bodies_classify_to_their_kind(row: ArmRow) -> None:
    failure = classify_azure(arm_exception(row))
    assert (failure.kind, failure.code) == (row.kind, row.code), row.source


@dataclass(frozen=True)
class NovaRow:
    source: str
    status: int
    body: dict[str, Any]
    operation: str
    kind: ErrorKind


NOVA_ROWS = [
    NovaRow(
        "nova/api/openstack/compute/servers.py (OverQuota -> HTTPForbidden) with "
        "nova/exception.py TooManyInstances",
        403,
        {
            "forbidden": {
                "code": 403,
                "message": "Quota exceeded for instances: Requested 1, "
                "but already used 10 of 10 instances",
            }
        },
        "create",
        ErrorKind.QUOTA,
    ),
    NovaRow(
        "nova/api/openstack/compute/servers.py (ExternalNetworkAttachForbidden -> 403)",
        403,
        {
            "forbidden": {
                "code": 403,
                "message": "It is not allowed to create an interface on "
                "external network 5b0e9d1c-0000-4000-8000-000000000002",
            }
        },
        "create",
        ErrorKind.INVALID,
    ),
    NovaRow(
        "OverQuota before microversion 2.1 (nova/exception.py OverQuota code = 413)",
        413,
        {"overLimit": {"code": 413, "message": "Quota exceeded for cores"}},
        "create",
        ErrorKind.QUOTA,
    ),
    NovaRow(
        "a rate limiter in front of Nova (429)",
        429,
        {"overLimit": {"code": 429, "message": "This request was rate-limited."}},
        "create",
        ErrorKind.THROTTLED,
    ),
]


def nova_exception(row: NovaRow) -> sdk.SDKException:
    raw = requests.Response()
    raw.status_code = row.status
    raw.headers["Content-Type"] = "application/json"
    raw._content = json.dumps(row.body).encode()
    raw.url = "http://nova.example/v2.1/servers"
    with pytest.raises(sdk.SDKException) as caught:
        sdk.raise_from_response(raw)
    return caught.value


@pytest.mark.parametrize("row", NOVA_ROWS, ids=[f"{r.status}-{r.kind.value}" for r in NOVA_ROWS])
def test_nova_real_answers_classify_to_their_kind(row: NovaRow) -> None:
    failure = classify_openstack(nova_exception(row), row.operation)
    assert failure.kind is row.kind, row.source


FAULT_ROWS = [
    (
        "nova/exception.py NoValidHost, code 500 (nova/compute/utils.py exception_to_dict)",
        {"code": 500, "message": "No valid host was found. There are not enough hosts available."},
        ErrorKind.CAPACITY,
    ),
    (
        "nova/conductor/manager.py MaxRetriesExceeded: every host failed to build it",
        {
            "code": 500,
            "message": "Exceeded maximum number of retries. Exhausted all hosts "
            "available for retrying build failures for instance 0c1f.",
        },
        ErrorKind.OTHER,
    ),
    (
        "nova/compute/manager.py BuildAbortException around ImageUnacceptable",
        {
            "code": 500,
            "message": "Build of instance 0c1f aborted: Image 7e1f is unacceptable: "
            "Image has no associated data",
        },
        ErrorKind.OTHER,
    ),
    (
        "nova/conductor/manager.py quota recheck: TooManyInstances, code 413",
        {
            "code": 413,
            "message": "Quota exceeded for instances: Requested 1, but already used "
            "10 of 10 instances",
        },
        ErrorKind.QUOTA,
    ),
]


@pytest.mark.parametrize("source,fault,kind", FAULT_ROWS, ids=[k.value for _, _, k in FAULT_ROWS])
def test_nova_server_faults_classify_to_their_kind(
    source: str, fault: dict[str, Any], kind: ErrorKind
) -> None:
    server = Server.existing(id="0c1f", status="ERROR", fault=fault)
    assert fault_failure(server.fault).kind is kind, source

"""Azure error mapping (one code table, never message text) and the pure request shapes."""

from __future__ import annotations

import base64
import json
import re
from types import SimpleNamespace
from typing import Any

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.mgmt.core.exceptions import ARMErrorFormat

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.azure.errors import ERROR_KINDS, classify, family_quota, is_not_found
from clustermgr.providers.azure.shapes import (
    Names,
    VmRequest,
    image_reference,
    instance_state,
    instance_type_of,
    names_for,
    vm_body,
)
from clustermgr.providers.base import InstanceState, LaunchSpec

VALID_VM_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}[a-z0-9]$")


class FakeResponse:
    """Just enough of an azure-core HttpResponse for HttpResponseError to parse."""

    def __init__(self, status: int, body: Any) -> None:
        self.status_code = status
        self.reason = "Reason"
        self._text = json.dumps(body)
        self.headers: dict[str, str] = {}
        self.request = None

    def text(self, encoding: str | None = None) -> str:
        return self._text


def arm_error(status: int, code: str, message: str = "whatever", **more: Any) -> HttpResponseError:
    body = {"error": {"code": code, "message": message, **more}}
    return HttpResponseError(response=FakeResponse(status, body))


QUOTA_MESSAGE = (
    "Operation could not be completed as it results in exceeding approved Total Regional "
    "Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, "
    "Current Limit: 10, Current Usage: 8, Additional Required: 4."
)
QUOTA_INFO = [{"type": "QuotaDetails", "info": {"currentLimit": 10, "currentUsage": 8}}]


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (200, "AllocationFailed", ErrorKind.CAPACITY),  # a failed long-running operation
        (200, "ZonalAllocationFailed", ErrorKind.CAPACITY),
        (409, "SkuNotAvailable", ErrorKind.CAPACITY),
        (409, "OverconstrainedAllocationRequest", ErrorKind.CAPACITY),
        (409, "QuotaExceeded", ErrorKind.QUOTA),
        (429, "TooManyRequests", ErrorKind.THROTTLED),
        (429, "SubscriptionRequestsThrottled", ErrorKind.THROTTLED),
        (401, "InvalidAuthenticationToken", ErrorKind.AUTH),
        (403, "AuthorizationFailed", ErrorKind.AUTH),
        (400, "InvalidParameter", ErrorKind.INVALID),
        (404, "ImageNotFound", ErrorKind.INVALID),
        (500, "InternalServerError", ErrorKind.TRANSIENT),
        (409, "Conflict", ErrorKind.TRANSIENT),
    ],
)
def test_arm_codes_map_through_the_one_table(status: int, code: str, kind: ErrorKind) -> None:
    failure = classify(arm_error(status, code))
    assert (failure.kind, failure.code, failure.status) == (kind, code, status)


def test_message_text_decides_nothing_but_operation_not_allowed() -> None:
    misleading = arm_error(409, "AllocationFailed", "quota exceeded; throttled; unauthorized")
    assert classify(misleading).kind is ErrorKind.CAPACITY
    assert classify(arm_error(409, "SomethingNew", "AllocationFailed")).kind is ErrorKind.OTHER


def test_operation_not_allowed_is_quota_when_additional_info_says_quota() -> None:
    # as the generated SDK raises it (ARMErrorFormat parses additionalInfo) ...
    response = FakeResponse(409, {"error": {"code": "OperationNotAllowed", "message": "x"}})
    response._text = json.dumps(
        {"error": {"code": "OperationNotAllowed", "message": "x", "additionalInfo": QUOTA_INFO}}
    )
    direct = HttpResponseError(response=response, error_format=ARMErrorFormat)
    assert [i.type for i in direct.error.additional_info] == ["QuotaDetails"]
    # ... and as a failed long-running operation raises it (plain ODataV4Format)
    polled = arm_error(200, "OperationNotAllowed", "x", additionalInfo=QUOTA_INFO)
    for exc in (direct, polled):
        failure = classify(exc)
        assert (failure.kind, failure.code) == (ErrorKind.QUOTA, "OperationNotAllowed")


def test_operation_not_allowed_is_quota_when_a_detail_code_is_a_quota_code() -> None:
    nested = [{"code": "Conflict", "message": "m", "details": [{"code": "QuotaExceeded"}]}]
    exc = arm_error(409, "OperationNotAllowed", "x", details=nested)
    assert classify(exc).kind is ErrorKind.QUOTA


def test_operation_not_allowed_without_quota_or_throttling_is_other() -> None:
    deleting = arm_error(409, "OperationNotAllowed", "VM n-001 is being deleted.")
    assert classify(deleting).kind is ErrorKind.OTHER
    other_info = [{"type": "PolicyViolation", "info": {"policyDefinitionName": "p"}}]
    assert classify(arm_error(409, "OperationNotAllowed", additionalInfo=other_info)).kind is (
        ErrorKind.OTHER
    )


def test_operation_not_allowed_naming_a_quota_is_quota() -> None:
    # the message is where ARM names the quota (no additionalInfo in real answers)
    worded = arm_error(409, "OperationNotAllowed", QUOTA_MESSAGE, details=[{"code": "Conflict"}])
    assert classify(worded).kind is ErrorKind.QUOTA


@pytest.mark.parametrize(
    ("status", "kind"),
    [(429, ErrorKind.THROTTLED), (503, ErrorKind.TRANSIENT), (403, ErrorKind.AUTH)],
)
def test_unknown_code_falls_back_to_the_status(status: int, kind: ErrorKind) -> None:
    assert classify(arm_error(status, "NeverHeardOfIt")).kind is kind


def test_table_values_are_error_kinds() -> None:
    assert all(isinstance(v, ErrorKind) for v in ERROR_KINDS.values())


def test_aad_token_errors_are_auth_with_the_oauth_code() -> None:
    body = {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid secret"}
    exc = ClientAuthenticationError(response=FakeResponse(401, body))
    failure = classify(exc)
    assert (failure.kind, failure.code) == (ErrorKind.AUTH, "invalid_client")
    bare = classify(ClientAuthenticationError(message="ClientSecretCredential: no token"))
    assert bare.kind is ErrorKind.AUTH


def test_connection_failures_are_transient() -> None:
    assert classify(ServiceRequestError("connection refused")).kind is ErrorKind.TRANSIENT


def test_not_found() -> None:
    assert is_not_found(arm_error(404, "ResourceNotFound"))
    assert is_not_found(ResourceNotFoundError(response=FakeResponse(404, {})))
    assert not is_not_found(arm_error(409, "Conflict"))


# ----------------------------------------------------------------------------- shapes


def test_vm_names_are_deterministic_valid_and_per_request() -> None:
    first = names_for("prod", "gpu-a100-001", "req-1")
    assert first == names_for("prod", "gpu-a100-001", "req-1")
    assert first.vm != names_for("prod", "gpu-a100-001", "req-2").vm
    assert first.vm != names_for("prod", "gpu-a100-002", "req-1").vm
    assert first.vm.startswith("prod-gpu-a100-001-")
    assert first.os_disk == f"{first.vm}-osdisk"
    assert first.computer == "gpu-a100-001"
    long = names_for("Cluster_With.Odd" * 5, "Node_Name" * 10, "r")
    assert VALID_VM_NAME.match(long.vm) and len(long.vm) <= 64
    assert VALID_VM_NAME.match(first.vm)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (
            "Canonical:ubuntu-24_04-lts:server:latest",
            {"publisher": "Canonical", "version": "latest"},
        ),
        ("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/images/img", {"id": ...}),
        (
            "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/galleries/g/images/d/versions/1.0.0",
            {"id": ...},
        ),
        ("ami-12345", None),
        ("a:b:c", None),
    ],
)
def test_image_reference_forms(image: str, expected: dict[str, Any] | None) -> None:
    ref = image_reference(image)
    if expected is None:
        assert ref is None
        return
    assert ref is not None
    for key, value in expected.items():
        assert ref[key] == (image if value is ... else value)


def spec(**kw: Any) -> LaunchSpec:
    base: dict[str, Any] = {
        "template": "gpu",
        "instance_types": ("Standard_ND96asr_v4",),
        "image": "Canonical:ubuntu-24_04-lts:server:latest",
        "node_names": ("n1",),
        "subnets": ("/subscriptions/s/x/subnets/y",),
        "user_data": "#!/bin/sh\necho hi\n",
    }
    return LaunchSpec(**{**base, **kw})


def request(zone: str | None = None) -> VmRequest:
    names = Names("vm1", "vm1-osdisk", "n1")
    size = "Standard_ND96asr_v4"
    return VmRequest("eastus", names, "/nic/id", size, zone, {"a": "b"}, "ssh-rsa K")


def test_spot_vm_body_has_priority_eviction_delete_and_max_price() -> None:
    props = vm_body(spec(market="spot", max_spot_price=3.5), request())["properties"]
    assert props["priority"] == "Spot"
    assert props["evictionPolicy"] == "Delete"
    assert props["billingProfile"] == {"maxPrice": 3.5}
    unlimited = vm_body(spec(market="spot"), request())["properties"]
    assert unlimited["billingProfile"] == {"maxPrice": -1}
    assert "priority" not in vm_body(spec(), request())["properties"]


def test_vm_body_deletes_disk_and_nic_with_the_vm_and_carries_user_data() -> None:
    body = vm_body(spec(), request(zone="2"))
    props = body["properties"]
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert props["storageProfile"]["osDisk"]["name"] == "vm1-osdisk"
    assert props["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] == "Delete"
    decoded = base64.b64decode(props["osProfile"]["customData"]).decode()
    assert decoded == "#!/bin/sh\necho hi\n"
    assert base64.b64decode(props["userData"]).decode() == decoded
    assert body["zones"] == ["2"] and body["tags"] == {"a": "b"}
    assert props["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True


def sku(name: str, caps: dict[str, str], kind: str = "virtualMachines", family: str = "") -> Any:
    items = [SimpleNamespace(name=k, value=v) for k, v in caps.items()]
    return SimpleNamespace(
        name=name, resource_type=kind, locations=["eastus"], capabilities=items, family=family
    )


def test_skus_map_to_instance_types() -> None:
    nd = instance_type_of(
        sku("Standard_ND96asr_v4", {"vCPUs": "96", "MemoryGB": "900", "GPUs": "8"}, family="x"),
        "eastus",
    )
    assert nd is not None
    assert (nd.vcpus, nd.memory_mb, nd.gpu_count, nd.gpu_model) == (96, 900 * 1024, 8, "a100")
    nc = instance_type_of(
        sku("Standard_NC24ads_A100_v4", {"vCPUs": "24", "MemoryGB": "220", "GPUs": "1"}), "eastus"
    )
    assert nc is not None and (nc.gpu_count, nc.gpu_model, nc.gpu_memory_mb) == (1, "a100", 81920)
    d2 = instance_type_of(sku("Standard_D2s_v3", {"vCPUs": "2", "MemoryGB": "8"}), "eastus")
    assert d2 is not None and (d2.gpu_count, d2.gpu_model) == (0, None)
    assert instance_type_of(sku("Premium_LRS", {}, kind="disks"), "eastus") is None
    assert instance_type_of(sku("Standard_D2s_v3", {"vCPUs": "2"}), "westus") is None


@pytest.mark.parametrize(
    ("provisioning", "statuses", "state"),
    [
        ("Creating", [], InstanceState.PENDING),
        ("Succeeded", ["ProvisioningState/succeeded", "PowerState/running"], InstanceState.RUNNING),
        ("Succeeded", ["PowerState/deallocated"], InstanceState.TERMINATED),
        ("Succeeded", [], InstanceState.RUNNING),
        ("Deleting", ["PowerState/deallocating"], InstanceState.STOPPING),
        ("Failed", [], InstanceState.ERROR),
    ],
)
def test_instance_state(provisioning: str, statuses: list[str], state: InstanceState) -> None:
    assert instance_state(provisioning, statuses) is state


@pytest.mark.parametrize(
    ("quota", "family"),
    [
        ("standardNDASv4Family Cores", "standardNDASv4Family"),  # binds that family only
        ("Total Regional Cores", ""),  # binds every size
        ("LowPriorityCores", ""),  # every spot size
    ],
)
def test_a_family_cores_quota_names_its_family_the_regional_ones_none(
    quota: str, family: str
) -> None:
    message = (
        f"Operation could not be completed as it results in exceeding approved {quota} "
        "quota. Additional details - Deployment Model: Resource Manager, Location: eastus"
    )
    assert family_quota(ErrorKind.QUOTA, message) == family
    assert family_quota(ErrorKind.OTHER, message) == ""


@pytest.mark.parametrize(
    "code", [c for c in ERROR_KINDS if isinstance(c, str) and c != "OperationNotAllowed"]
)
def test_every_arm_code_of_the_table_is_classified_as_it_says(code: str) -> None:
    # a status no row names, so the code alone decides
    assert classify(arm_error(418, code, "whatever: quota exceeded")).kind is ERROR_KINDS[code]

"""Azure failures -> ErrorKind, from the ARM error `code` (or the HTTP status).

`ERROR_KINDS` is the one table. Codes come from `HttpResponseError.error.code` (ARM's
`{"error": {"code": ...}}`, also what a failed long-running operation reports); when the
code is not in the table the HTTP status is looked up in the same table. The shapes below
are the ones the real service sends (tests/unit/test_cloud_error_shapes.py feeds each one
through the SDK's own exception type, with its source):

- Wrapped: a long-running operation's final status can carry `ResourceOperationFailure`
  (or `ResourceDeploymentFailure`) with the real cause in `details[]` (AllocationFailed,
  ZonalAllocationFailed, ...): the first detail code the table knows decides, and is the
  code reported.
- `OperationNotAllowed` is Compute's code for many refusals. It is THROTTLED when a detail
  says `TooManyRequests` (a 429, often without Retry-After); QUOTA when its message names a
  quota ("... exceeding approved Total Regional Cores quota", "... standardNDASv4Family
  Cores quota", spot: "... LowPriorityCores quota"), a detail code is a quota code, or an
  additionalInfo says QuotaDetails; OTHER otherwise (e.g. changing a VM being deleted).
  That message is the only place the service names a quota, so it is read here and
  nowhere else; `family_quota` reads from it whether the quota binds one VM family (that
  family's cores: the launch tries the next size) or every size (Total Regional Cores,
  LowPriorityCores: the launch stops).
- `NicReservedForAnotherVm` (400): a NIC of a failed or deleted VM stays reserved for it
  for 180 s, for deletion and for reuse alike: TRANSIENT (the provider uses a fresh NIC and
  deletes the old one later).
"""

from __future__ import annotations

import json
import re
from typing import Any

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.skeleton import Failure, Sdk, first_line

SDK_ERRORS: tuple[type[BaseException], ...] = (AzureError,)

ERROR_KINDS: dict[str | int, ErrorKind] = {
    # capacity: try another size / zone / region
    "AllocationFailed": ErrorKind.CAPACITY,
    "ZonalAllocationFailed": ErrorKind.CAPACITY,
    "OverconstrainedAllocationRequest": ErrorKind.CAPACITY,
    "OverconstrainedZonalAllocationRequest": ErrorKind.CAPACITY,
    "SkuNotAvailable": ErrorKind.CAPACITY,
    "SpotVMEvictionAllocationFailed": ErrorKind.CAPACITY,
    "AllocationTimedOut": ErrorKind.CAPACITY,
    # quota
    "QuotaExceeded": ErrorKind.QUOTA,
    "OperationNotAllowed": ErrorKind.OTHER,  # QUOTA when its details say so (QUOTA_DETAILS)
    "LowPriorityQuotaExceeded": ErrorKind.QUOTA,
    "ResourceQuotaExceeded": ErrorKind.QUOTA,
    # throttling
    "TooManyRequests": ErrorKind.THROTTLED,
    "SubscriptionRequestsThrottled": ErrorKind.THROTTLED,
    "ResourceGroupRequestsThrottled": ErrorKind.THROTTLED,
    "TenantRequestsThrottled": ErrorKind.THROTTLED,
    "RetryableErrorDueToThrottling": ErrorKind.THROTTLED,
    # credentials and permissions
    "InvalidAuthenticationToken": ErrorKind.AUTH,
    "InvalidAuthenticationTokenTenant": ErrorKind.AUTH,
    "ExpiredAuthenticationToken": ErrorKind.AUTH,
    "AuthenticationFailed": ErrorKind.AUTH,
    "AuthorizationFailed": ErrorKind.AUTH,
    "LinkedAuthorizationFailed": ErrorKind.AUTH,
    "invalid_client": ErrorKind.AUTH,  # AAD token endpoint (OAuth error field)
    "unauthorized_client": ErrorKind.AUTH,
    "invalid_request": ErrorKind.AUTH,
    "CredentialUnavailable": ErrorKind.AUTH,
    # the request itself is wrong
    "InvalidParameter": ErrorKind.INVALID,
    "InvalidResourceReference": ErrorKind.INVALID,
    "ImageNotFound": ErrorKind.INVALID,
    "PlatformImageNotFound": ErrorKind.INVALID,
    "GalleryImageNotFound": ErrorKind.INVALID,
    "InvalidTemplate": ErrorKind.INVALID,
    "ResourceGroupNotFound": ErrorKind.INVALID,
    "SubscriptionNotFound": ErrorKind.INVALID,
    # worth another try later
    "RetryableError": ErrorKind.TRANSIENT,
    "InternalServerError": ErrorKind.TRANSIENT,
    "InternalExecutionError": ErrorKind.TRANSIENT,
    "ServiceUnavailable": ErrorKind.TRANSIENT,
    "GatewayTimeout": ErrorKind.TRANSIENT,
    "OperationPreempted": ErrorKind.TRANSIENT,
    "Conflict": ErrorKind.TRANSIENT,  # another operation on the resource is in progress
    "NicReservedForAnotherVm": ErrorKind.TRANSIENT,  # for 180 s after its VM failed or went
    "ServiceRequestError": ErrorKind.TRANSIENT,  # no connection (our own code)
    "ServiceResponseError": ErrorKind.TRANSIENT,
    # HTTP status when the code is not known
    401: ErrorKind.AUTH,
    403: ErrorKind.AUTH,
    408: ErrorKind.TRANSIENT,
    429: ErrorKind.THROTTLED,
    500: ErrorKind.TRANSIENT,
    502: ErrorKind.TRANSIENT,
    503: ErrorKind.TRANSIENT,
    504: ErrorKind.TRANSIENT,
    400: ErrorKind.INVALID,
}

NOT_FOUND_CODES = frozenset({"ResourceNotFound", "NotFound", "ParentResourceNotFound"})
# Codes that are QUOTA or THROTTLED only when the error's message or details say so.
QUOTA_IF_DETAILED = frozenset({"OperationNotAllowed"})
QUOTA_INFO_TYPES = frozenset({"QuotaDetails"})
# How a refusal names a quota: "... results in exceeding approved Total Regional Cores
# quota", "... approved standardNDASv4Family Cores quota", "... LowPriorityCores quota".
QUOTA_TEXT = re.compile(r"exceed\w*\b.*\bquota\b|\bLowPriorityCores\b", re.IGNORECASE)
# A quota of one VM family's cores: "... exceeding approved standardNDASv4Family Cores quota"
# (Azure/karpenter-provider-azure pkg/providers/instance/offerings/errordetailhandlers_test.go;
# the regional form, "... approved Total Regional Cores quota", is nforgeio/neonKUBE#1671).
# Only the message names the family: the error has no field for it.
FAMILY_QUOTA_TEXT = re.compile(r"\bapproved (\w+Family) Cores quota\b", re.IGNORECASE)
# Errors whose cause is in details[]: a long-running operation's terminal state.
WRAPPERS = frozenset({"ResourceOperationFailure", "ResourceDeploymentFailure"})


def error_code(exc: BaseException) -> str:
    """ARM's error code (or AAD's OAuth error), else the exception's class name."""
    if isinstance(exc, HttpResponseError):
        error = exc.error
        if error is not None and error.code:
            return str(error.code)
        aad = _aad_error(exc)
        if aad:
            return aad
    if isinstance(exc, ClientAuthenticationError) and type(exc).__name__.startswith("Credential"):
        return "CredentialUnavailable"
    return type(exc).__name__


def classify(exc: BaseException) -> Failure:
    code = error_code(exc)
    status = exc.status_code if isinstance(exc, HttpResponseError) else None
    nodes = _error_nodes(exc)
    if code in WRAPPERS:
        code = next((str(n.code) for n in nodes[1:] if str(n.code) in ERROR_KINDS), code)
    kind = ERROR_KINDS.get(code)
    if code in QUOTA_IF_DETAILED and isinstance(exc, HttpResponseError):
        kind = _operation_not_allowed(exc, nodes)
    if kind is None and status is not None:
        kind = ERROR_KINDS.get(status)
    if kind is None and isinstance(exc, ClientAuthenticationError):
        kind = ErrorKind.AUTH
    if kind is None and isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        kind = ErrorKind.TRANSIENT
    return Failure(kind or ErrorKind.OTHER, code, short_message(exc), status)


def family_quota(kind: ErrorKind, message: str) -> str:
    """The VM family whose cores quota refused a creation, from a classified failure's kind
    and message ("" when it is not QUOTA or binds every size: the regional total, spot's
    LowPriorityCores)."""
    if kind is not ErrorKind.QUOTA:
        return ""
    found = FAMILY_QUOTA_TEXT.search(message)
    return found.group(1) if found else ""


def _operation_not_allowed(exc: HttpResponseError, nodes: list[Any]) -> ErrorKind:
    """OperationNotAllowed: throttling, a quota, or another refusal (see the module doc)."""
    if any(ERROR_KINDS.get(str(n.code)) is ErrorKind.THROTTLED for n in nodes[1:]):
        return ErrorKind.THROTTLED
    if any(QUOTA_TEXT.search(str(n.message or "")) for n in nodes) or _names_quota(exc, nodes):
        return ErrorKind.QUOTA
    return ErrorKind.OTHER


def _error_nodes(exc: BaseException) -> list[Any]:
    """The ARM error and its details at any depth, depth first, the error itself first."""
    if not isinstance(exc, HttpResponseError) or exc.error is None:
        return []
    found: list[Any] = []
    stack: list[Any] = [exc.error]
    while stack:  # ODataV4Format parses `details` at every depth
        node = stack.pop(0)
        found.append(node)
        stack[:0] = list(node.details or [])
    return found


def is_not_found(exc: BaseException) -> bool:
    if not isinstance(exc, HttpResponseError):
        return False
    return exc.status_code == 404 or error_code(exc) in NOT_FOUND_CODES


def short_message(exc: BaseException, limit: int = 240) -> str:
    """The error's own message: first line, bounded. ARM/AAD messages carry no secrets."""
    if isinstance(exc, HttpResponseError) and exc.error is not None and exc.error.message:
        text = str(exc.error.message)
    elif isinstance(exc, AzureError):
        text = str(exc.message)
    else:
        text = str(exc)
    return first_line(text, limit) or type(exc).__name__[:limit]


def _names_quota(exc: HttpResponseError, nodes: list[Any]) -> bool:
    """Whether the error's structure says quota: a detail code (at any depth) that the table
    maps to QUOTA, or additionalInfo of type QuotaDetails (on the error or on a detail)."""
    quota_code = any(ERROR_KINDS.get(str(n.code)) is ErrorKind.QUOTA for n in nodes[1:])
    # ARMErrorFormat parses additionalInfo, but the error of a failed long-running operation
    # is a plain ODataV4Format: read additionalInfo from the answer's JSON as well.
    types = {str(i.type) for n in nodes for i in getattr(n, "additional_info", None) or ()}
    types |= _info_types(_body_error(exc))
    return quota_code or bool(types & QUOTA_INFO_TYPES)


def _info_types(error: dict[str, Any]) -> set[str]:
    """additionalInfo[].type of an ARM error object and of its details, at any depth."""
    types = {str(info.get("type")) for info in _dicts(error.get("additionalInfo"))}
    for detail in _dicts(error.get("details")):
        types |= _info_types(detail)
    return types


def _body_error(exc: HttpResponseError) -> dict[str, Any]:
    """The `error` object of the answer's JSON body ({} when there is none)."""
    body = _json_body(exc)
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _json_body(exc: HttpResponseError) -> Any:
    response = exc.response
    if response is None:
        return None
    try:
        return json.loads(response.text())
    except Exception:
        return None


def _aad_error(exc: HttpResponseError) -> str:
    """The `error` field of an AAD token-endpoint answer ({"error": "invalid_client", ...})."""
    body = _json_body(exc)
    value = body.get("error") if isinstance(body, dict) else None
    return value if isinstance(value, str) else ""


SDK = Sdk(SDK_ERRORS, classify)

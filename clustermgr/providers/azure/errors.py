"""Azure failures -> ErrorKind, from the ARM error `code` (or the HTTP status), never the text.

`ERROR_KINDS` is the one table. Codes come from `HttpResponseError.error.code` (ARM's
`{"error": {"code": ...}}`, also what a failed long-running operation reports); when the
code is not in the table the HTTP status is looked up in the same table.

ARM answers `OperationNotAllowed` both for "exceeding approved ... quota" and for refusals that
have nothing to do with quota (e.g. changing a VM that is being deleted). It is QUOTA only
when the error's structured details say quota: a `details[].code` (at any depth) that the
table maps to QUOTA, or an `additionalInfo[].type` of `QuotaDetails`. Otherwise OTHER.
"""

from __future__ import annotations

import json
from typing import Any

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from clustermgr.errors import ErrorKind
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
# Codes that are QUOTA only when the error's details or additionalInfo name a quota.
QUOTA_IF_DETAILED = frozenset({"OperationNotAllowed"})
QUOTA_INFO_TYPES = frozenset({"QuotaDetails"})


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
    kind = ERROR_KINDS.get(code)
    if code in QUOTA_IF_DETAILED and isinstance(exc, HttpResponseError) and _names_quota(exc):
        kind = ErrorKind.QUOTA
    if kind is None and status is not None:
        kind = ERROR_KINDS.get(status)
    if kind is None and isinstance(exc, ClientAuthenticationError):
        kind = ErrorKind.AUTH
    if kind is None and isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        kind = ErrorKind.TRANSIENT
    return Failure(kind or ErrorKind.OTHER, code, short_message(exc), status)


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


def _names_quota(exc: HttpResponseError) -> bool:
    """Whether the ARM error's structured details (never its text) say it is about a quota:
    a detail code (at any depth) that the table maps to QUOTA, or additionalInfo of type
    QuotaDetails (on the error or on a detail)."""
    nodes: list[Any] = []
    stack: list[Any] = [exc.error] if exc.error is not None else []
    while stack:  # the error and its details: ODataV4Format parses `details` at every depth
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.details)
    codes = {str(node.code) for node in nodes[1:]}
    # ARMErrorFormat parses additionalInfo, but the error of a failed long-running operation
    # is a plain ODataV4Format: read additionalInfo from the answer's JSON as well.
    types = {str(i.type) for n in nodes for i in getattr(n, "additional_info", None) or ()}
    types |= _info_types(_body_error(exc))
    quota_code = any(ERROR_KINDS.get(code) is ErrorKind.QUOTA for code in codes)
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

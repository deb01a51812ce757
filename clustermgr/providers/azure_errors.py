"""Azure failures -> ErrorKind, from the ARM error `code` (or the HTTP status), never the text.

`ERROR_KINDS` is the one table. Codes come from `HttpResponseError.error.code` (ARM's
`{"error": {"code": ...}}`, also what a failed long-running operation reports); when the
code is not in the table the HTTP status is looked up in the same table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from clustermgr.errors import ErrorKind

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
    "OperationNotAllowed": ErrorKind.QUOTA,  # ARM's code for "exceeding approved ... quota"
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


@dataclass(frozen=True)
class AzureFailure:
    kind: ErrorKind
    code: str
    message: str
    status: int | None = None


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


def classify(exc: BaseException) -> AzureFailure:
    code = error_code(exc)
    status = exc.status_code if isinstance(exc, HttpResponseError) else None
    kind = ERROR_KINDS.get(code)
    if kind is None and status is not None:
        kind = ERROR_KINDS.get(status)
    if kind is None and isinstance(exc, ClientAuthenticationError):
        kind = ErrorKind.AUTH
    if kind is None and isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        kind = ErrorKind.TRANSIENT
    return AzureFailure(kind or ErrorKind.OTHER, code, short_message(exc), status)


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
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:limit]


def _aad_error(exc: HttpResponseError) -> str:
    """The `error` field of an AAD token-endpoint answer ({"error": "invalid_client", ...})."""
    response = exc.response
    if response is None:
        return ""
    try:
        body = json.loads(response.text())
    except Exception:
        return ""
    value = body.get("error") if isinstance(body, dict) else None
    return value if isinstance(value, str) else ""

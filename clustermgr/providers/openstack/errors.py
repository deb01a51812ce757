"""OpenStack failures -> ErrorKind, from the HTTP status or the exception class.

`ERROR_KINDS` is the one table. Keys, most specific first:

- `(operation, status)`: a status that means something particular for one call. Nova
  answers a server create with 403 both for an over-quota request (OverQuota, "Quota
  exceeded for instances: Requested 1, but already used 10 of 10 instances") and for a
  policy refusal of the request itself (ExternalNetworkAttachForbidden, "It is not allowed
  to create an interface on external network ...", BootFromVolumeRequiredForZeroDiskFlavor):
  nova/api/openstack/compute/servers.py turns both into HTTPForbidden. The message is the
  only difference, so a 403 on "create" is QUOTA when it names a quota and INVALID
  otherwise; a 403 anywhere else is a policy refusal (AUTH).
- `("fault", code)`: a server that went to status ERROR, keyed by its fault `code`.
  nova/compute/utils.py `exception_to_dict` gives every fault code 500 unless the exception
  carries another: NoValidHost ("No valid host was found. ...") but also every build
  failure (BuildAbortException "Build of instance ... aborted: ...", MaxRetriesExceeded
  "Exceeded maximum number of retries. Exhausted all hosts available for retrying build
  failures ..." after every host failed to build it: a broken image, not a full cloud).
  So a 500 fault is CAPACITY only when its message says "No valid host was found", OTHER
  otherwise; OverQuota/TooManyInstances (the conductor's quota recheck) is fault 413: QUOTA.
- an HTTP status alone;
- an exception class name (the first one found along the exception's MRO), for failures
  that carry no status: connection errors, keystoneauth auth and catalog errors, config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import openstack.exceptions
import requests
from keystoneauth1 import exceptions as ksa_exceptions

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.skeleton import Failure, Sdk, first_line

SDK_ERRORS: tuple[type[BaseException], ...] = (
    openstack.exceptions.SDKException,
    ksa_exceptions.ClientException,
    requests.RequestException,
)

ErrorKey = int | str | tuple[str, int]

ERROR_KINDS: dict[ErrorKey, ErrorKind] = {
    # one call's own meaning of a status
    ("create", 403): ErrorKind.INVALID,  # a policy refusal; QUOTA when it names a quota
    ("create", 413): ErrorKind.QUOTA,  # OverQuota from Nova before microversion 2.1
    ("create", 409): ErrorKind.TRANSIENT,  # e.g. a port / name conflict being cleaned up
    ("delete", 409): ErrorKind.TRANSIENT,  # task in progress (e.g. still building)
    # a server in status ERROR, by fault code
    ("fault", 500): ErrorKind.OTHER,  # any build failure; CAPACITY when NO_VALID_HOST
    ("fault", 413): ErrorKind.QUOTA,  # TooManyInstances from the conductor's quota recheck
    ("fault", 503): ErrorKind.TRANSIENT,  # a service was unavailable while building
    # HTTP status of any other answer
    400: ErrorKind.INVALID,
    401: ErrorKind.AUTH,
    403: ErrorKind.AUTH,
    404: ErrorKind.INVALID,
    408: ErrorKind.TRANSIENT,
    409: ErrorKind.TRANSIENT,
    413: ErrorKind.QUOTA,
    429: ErrorKind.THROTTLED,
    500: ErrorKind.TRANSIENT,
    502: ErrorKind.TRANSIENT,
    503: ErrorKind.TRANSIENT,
    504: ErrorKind.TRANSIENT,
    # exception classes (keystoneauth1 / openstacksdk) without an HTTP status
    "Unauthorized": ErrorKind.AUTH,
    "AuthorizationFailure": ErrorKind.AUTH,
    "MissingAuthMethods": ErrorKind.AUTH,
    "AuthPluginException": ErrorKind.AUTH,  # missing / unknown auth plugin or options
    "ConfigException": ErrorKind.AUTH,  # no such cloud in clouds.yaml, unreadable file
    "ConnectTimeout": ErrorKind.TRANSIENT,
    "ConnectFailure": ErrorKind.TRANSIENT,
    "SSLError": ErrorKind.TRANSIENT,
    "ConnectionError": ErrorKind.TRANSIENT,
    "RetriableConnectionFailure": ErrorKind.TRANSIENT,
    "RequestException": ErrorKind.TRANSIENT,  # requests' own connection errors
    "ResourceTimeout": ErrorKind.TRANSIENT,
    "DiscoveryFailure": ErrorKind.TRANSIENT,
    "EndpointNotFound": ErrorKind.INVALID,  # no such service in this region's catalog
    "DuplicateResource": ErrorKind.INVALID,  # a name that matches more than one thing
    "NotFoundException": ErrorKind.INVALID,  # find_*(ignore_missing=False): no such name / id
}

# The one fault message that means the cloud had nowhere to put the server (NoValidHost).
NO_VALID_HOST = "No valid host was found"
# How Nova's OverQuota and TooManyInstances name a quota (nova/exception.py msg_fmt).
QUOTA_TEXT = re.compile(r"\bQuota exceeded\b", re.IGNORECASE)

# ProviderError.code of "it does not exist": a 404 answer, or find_* finding nothing.
NOT_FOUND_CODES = frozenset({"HTTP404", "NotFoundException"})


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of an openstacksdk (`status_code`) or keystoneauth (`http_status`) error."""
    for attr in ("status_code", "http_status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    return None


def classify(exc: BaseException, operation: str = "") -> Failure:
    """What kind of failure `exc` is, for the call `operation` ("create", "delete", ...)."""
    status = http_status(exc)
    kind: ErrorKind | None = None
    if status is not None:
        kind = ERROR_KINDS.get((operation, status)) or ERROR_KINDS.get(status)
    if operation == "create" and status == 403 and QUOTA_TEXT.search(short_message(exc)):
        kind = ErrorKind.QUOTA
    names = [klass.__name__ for klass in type(exc).__mro__]
    if kind is None:
        kind = next((ERROR_KINDS[n] for n in names if n in ERROR_KINDS), None)
    code = f"HTTP{status}" if status is not None else names[0]
    return Failure(kind or ErrorKind.OTHER, code, short_message(exc), status, _retry_after(exc))


def fault_failure(fault: Mapping[str, Any] | None) -> Failure:
    """The failure of a server that went to status ERROR, from its `fault` object."""
    fault = fault or {}
    code = fault.get("code")
    number = code if isinstance(code, int) else None
    kind = ERROR_KINDS.get(("fault", number)) if number is not None else None
    message = str(fault.get("message") or "server went to ERROR without a fault")
    if number == 500 and message.startswith(NO_VALID_HOST):
        kind = ErrorKind.CAPACITY
    label = f"ServerFault{number}" if number is not None else "ServerError"
    return Failure(kind or ErrorKind.OTHER, label, first_line(message), number)


def check_answer(response: Any) -> Any:
    """The response, or the SDK's HTTP error for an error answer (openstacksdk does not check
    the status of a streamed download)."""
    openstack.exceptions.raise_from_response(response)
    return response


def is_not_found(exc: BaseException) -> bool:
    return http_status(exc) == 404 or type(exc).__name__ == "NotFoundException"


def short_message(exc: BaseException, limit: int = 240) -> str:
    """The service's own message (Nova's `details`), else the exception text; first line.

    Neither carries credentials: keystoneauth never puts a request body in an error."""
    details = getattr(exc, "details", None)
    text = str(details) if details else str(getattr(exc, "message", "") or exc)
    return first_line(text, limit) or type(exc).__name__


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header (throttling answers), if the error has a response."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


SDK = Sdk(SDK_ERRORS, classify)

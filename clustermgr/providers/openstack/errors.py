"""OpenStack failures -> ErrorKind: what Nova or Neutron raised, else the HTTP status or the
exception class.

In order:

- a Neutron answer names its exception (`{"NeutronError": {"type": ...}}`): looked up in
  nova_neutron_codes.NEUTRON_TYPES, and reported as that code;
- a Nova answer does not: the exception is found by the answer's status and a fixed part of
  its message (nova_neutron_codes.NOVA_EXCEPTIONS, every row read from Nova's sources). This
  is how a 403 on create is told apart: Nova answers HTTPForbidden both for a quota
  (OverQuota and its kin: "Quota exceeded for instances: ...", "Maximum number of ports
  exceeded") and for a policy refusal of the request itself (ExternalNetworkAttachForbidden,
  BootFromVolumeRequiredForZeroDiskFlavor);
- `ERROR_KINDS`, keys most specific first: `(operation, status)` (a 403 on "create" that is no
  known exception is INVALID, elsewhere a 403 is a policy refusal: AUTH); an HTTP status
  alone; an exception class name (the first found along the exception's MRO) for failures
  without a status: connection errors, keystoneauth auth and catalog errors, config.

A server that went to status ERROR is read by its fault (`fault_failure`) the same way: a
Nova row by the fault's code and message (NoValidHost and a network without a free address
are CAPACITY; any other build failure, MaxRetriesExceeded included, is OTHER: the node
fails and no other flavor is tried), else `("fault", code)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openstack.exceptions
import requests
from keystoneauth1 import exceptions as ksa_exceptions

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.openstack.nova_neutron_codes import NEUTRON_KINDS, nova_row
from clustermgr.providers.skeleton import Failure, Sdk, first_line

SDK_ERRORS: tuple[type[BaseException], ...] = (
    openstack.exceptions.SDKException,
    ksa_exceptions.ClientException,
    requests.RequestException,
)

ErrorKey = int | str | tuple[str, int]

ERROR_KINDS: dict[ErrorKey, ErrorKind] = {
    # one call's own meaning of a status
    ("create", 403): ErrorKind.INVALID,  # a refusal of the request no Nova row names
    ("create", 413): ErrorKind.QUOTA,  # OverQuota from Nova before microversion 2.1
    ("create", 409): ErrorKind.TRANSIENT,  # e.g. a port / name conflict being cleaned up
    ("delete", 409): ErrorKind.TRANSIENT,  # task in progress (e.g. still building)
    # a server in status ERROR, by fault code
    ("fault", 500): ErrorKind.OTHER,  # any build failure no Nova row names
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

# The fault message that means the cloud had nowhere to put the server (NoValidHost).
NO_VALID_HOST = "No valid host was found"

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
    names = [klass.__name__ for klass in type(exc).__mro__]
    code = f"HTTP{status}" if status is not None else names[0]
    kind: ErrorKind | None = None
    neutron = neutron_type(exc)
    if neutron in NEUTRON_KINDS:
        kind, code = NEUTRON_KINDS[neutron], neutron
    elif status is not None and not neutron:
        row = nova_row(status, _full_message(exc))
        kind = row.kind if row is not None else None
    if kind is None and status is not None:
        kind = ERROR_KINDS.get((operation, status)) or ERROR_KINDS.get(status)
    if kind is None:
        kind = next((ERROR_KINDS[n] for n in names if n in ERROR_KINDS), None)
    return Failure(kind or ErrorKind.OTHER, code, short_message(exc), status, _retry_after(exc))


def fault_failure(fault: Mapping[str, Any] | None) -> Failure:
    """The failure of a server that went to status ERROR, from its `fault` object."""
    fault = fault or {}
    code = fault.get("code")
    number = code if isinstance(code, int) else None
    message = str(fault.get("message") or "server went to ERROR without a fault")
    row = nova_row(number, message) if number is not None else None
    kind = row.kind if row is not None else None
    if kind is None and number is not None:
        kind = ERROR_KINDS.get(("fault", number))
    label = f"ServerFault{number}" if number is not None else "ServerError"
    return Failure(kind or ErrorKind.OTHER, label, first_line(message), number)


def neutron_type(exc: BaseException) -> str:
    """The exception class Neutron names in its answer ("" for any other answer)."""
    response = getattr(exc, "response", None)
    if response is None or "json" not in str(getattr(response, "headers", {}).get("Content-Type")):
        return ""
    try:
        body = response.json()
    except ValueError:
        return ""
    error = body.get("NeutronError") if isinstance(body, dict) else None
    found = error.get("type") if isinstance(error, dict) else None
    return found if isinstance(found, str) else ""


def _full_message(exc: BaseException) -> str:
    """The service's whole message (Nova's `details`), not cut to one line."""
    details = getattr(exc, "details", None)
    return str(details) if details else str(getattr(exc, "message", "") or exc)


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

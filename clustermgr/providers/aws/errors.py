"""EC2 failures -> ErrorKind, from the error code (never the message text).

`ERROR_KINDS` is the one table. A code is looked up as is, then without a `Server.` /
`Client.` prefix, then by its family before the first dot (`InvalidAMIID.NotFound` ->
`InvalidAMIID`). botocore's own exceptions (no answer from AWS) are looked up by class name.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.skeleton import Failure, Sdk, first_line

SDK_ERRORS: tuple[type[BaseException], ...] = (ClientError, BotoCoreError)

ERROR_KINDS: dict[str, ErrorKind] = {
    # capacity: try another type / zone / region
    "InsufficientInstanceCapacity": ErrorKind.CAPACITY,
    "InsufficientCapacity": ErrorKind.CAPACITY,
    "InsufficientHostCapacity": ErrorKind.CAPACITY,
    "InsufficientReservedInstanceCapacity": ErrorKind.CAPACITY,
    # a targeted capacity reservation (or its hosts) cannot hold the launch
    "ReservationCapacityExceeded": ErrorKind.CAPACITY,
    "InsufficientCapacityOnHost": ErrorKind.CAPACITY,
    "Unsupported": ErrorKind.CAPACITY,  # the type is not offered in the requested zone
    "SpotMaxPriceTooLow": ErrorKind.CAPACITY,
    "InsufficientFreeAddressesInSubnet": ErrorKind.CAPACITY,  # another subnet may have room
    # quota
    "InstanceLimitExceeded": ErrorKind.QUOTA,
    "VcpuLimitExceeded": ErrorKind.QUOTA,
    "MaxSpotInstanceCountExceeded": ErrorKind.QUOTA,
    "MaxSpotFleetRequestCountExceeded": ErrorKind.QUOTA,
    # throttling
    "RequestLimitExceeded": ErrorKind.THROTTLED,
    "Throttling": ErrorKind.THROTTLED,
    "ThrottlingException": ErrorKind.THROTTLED,
    # credentials and permissions
    "AuthFailure": ErrorKind.AUTH,
    "UnauthorizedOperation": ErrorKind.AUTH,
    "InvalidClientTokenId": ErrorKind.AUTH,
    "SignatureDoesNotMatch": ErrorKind.AUTH,
    "ExpiredToken": ErrorKind.AUTH,
    "RequestExpired": ErrorKind.AUTH,
    "AccessDenied": ErrorKind.AUTH,
    "OptInRequired": ErrorKind.AUTH,
    "NoCredentialsError": ErrorKind.AUTH,  # botocore: nothing in the credential chain
    "PartialCredentialsError": ErrorKind.AUTH,
    "ProfileNotFound": ErrorKind.AUTH,
    "CredentialRetrievalError": ErrorKind.AUTH,
    "TokenRetrievalError": ErrorKind.AUTH,
    # the request itself is wrong
    "InvalidParameterValue": ErrorKind.INVALID,
    "InvalidParameterCombination": ErrorKind.INVALID,
    "InvalidParameter": ErrorKind.INVALID,
    "MissingParameter": ErrorKind.INVALID,
    "InvalidAMIID": ErrorKind.INVALID,
    "InvalidInstanceType": ErrorKind.INVALID,
    "InvalidSubnetID": ErrorKind.INVALID,
    "InvalidGroup": ErrorKind.INVALID,
    "InvalidKeyPair": ErrorKind.INVALID,
    "InvalidLaunchTemplateName": ErrorKind.INVALID,
    "InvalidPlacementGroup": ErrorKind.INVALID,
    "InvalidCapacityReservationId": ErrorKind.INVALID,
    "IdempotentParameterMismatch": ErrorKind.INVALID,
    "ParamValidationError": ErrorKind.INVALID,  # botocore: rejected before sending
    "NoRegionError": ErrorKind.INVALID,
    # worth another try later
    "InternalError": ErrorKind.TRANSIENT,
    "InternalFailure": ErrorKind.TRANSIENT,
    "ServiceUnavailable": ErrorKind.TRANSIENT,
    "Unavailable": ErrorKind.TRANSIENT,
    "EndpointConnectionError": ErrorKind.TRANSIENT,
    "ConnectTimeoutError": ErrorKind.TRANSIENT,
    "ReadTimeoutError": ErrorKind.TRANSIENT,
    "ConnectionClosedError": ErrorKind.TRANSIENT,
}

# Instance ids that no longer exist: not an error for terminate.
NOT_FOUND_CODES = frozenset({"InvalidInstanceID.NotFound"})
# CreateFleet is not offered at this endpoint: launch with RunInstances instead.
NO_FLEET_API_CODES = frozenset({"InvalidAction", "NotImplemented", "UnsupportedOperation"})


def kind_of(code: str) -> ErrorKind:
    """The ErrorKind of an EC2 (or botocore) error code; OTHER when not in the table."""
    bare = code.removeprefix("Server.").removeprefix("Client.")
    for candidate in (code, bare, bare.split(".", 1)[0]):
        kind = ERROR_KINDS.get(candidate)
        if kind is not None:
            return kind
    return ErrorKind.OTHER


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "Unknown")
    return type(exc).__name__


def classify(exc: BaseException) -> Failure:
    code = error_code(exc)
    status = None
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    kind = kind_of(code)
    if kind is ErrorKind.OTHER and isinstance(exc, BotoCoreError) and "Credential" in code:
        kind = ErrorKind.AUTH
    return Failure(kind, code, short_message(exc), status)


def provider_error(exc: BaseException, provider: str) -> ProviderError:
    """An SDK failure as the ProviderError a capability raises (classified, one line)."""
    failure = classify(exc)
    return ProviderError(failure.kind, failure.message, provider=provider, code=failure.code)


def short_message(exc: BaseException, limit: int = 240) -> str:
    """The error's own message, first line, bounded. AWS messages carry no secrets."""
    if isinstance(exc, ClientError):
        text = str(exc.response.get("Error", {}).get("Message") or "")
    else:
        text = str(exc)
    return first_line(text, limit) or type(exc).__name__[:limit]


SDK = Sdk(SDK_ERRORS, classify)

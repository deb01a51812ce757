"""EC2 failures -> ErrorKind, from the error code (never the message text).

`ERROR_KINDS` is the one table, built from the rows of ec2_codes.py (every code EC2
documents for the calls cm-scale makes, each with why). A code is looked up as is, then
without a `Server.` / `Client.` prefix, then by its family before the first dot
(`InvalidAMIID.NotFound` -> `InvalidAMIID`). botocore's own exceptions (no answer from AWS)
are looked up by class name.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.aws.ec2_codes import BOTOCORE_EXCEPTIONS, EC2_CODES
from clustermgr.providers.skeleton import Failure, Sdk, first_line

SDK_ERRORS: tuple[type[BaseException], ...] = (ClientError, BotoCoreError)

ERROR_KINDS: dict[str, ErrorKind] = {
    row.code: row.kind for row in (*EC2_CODES, *BOTOCORE_EXCEPTIONS)
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

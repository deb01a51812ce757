"""The local provider's failures: AUTH for what it may not do, NetError for its plumbing."""

from __future__ import annotations

from clustermgr.core.errors import ErrorKind, ProviderError


def auth_error(message: str) -> ProviderError:
    return ProviderError(ErrorKind.AUTH, message, provider="local", code="NotAuthorized")


class NetError(ProviderError):
    def __init__(self, message: str, code: str = "LocalNetwork") -> None:
        super().__init__(ErrorKind.OTHER, message, provider="local", code=code)

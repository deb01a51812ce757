"""BMC failures: a driver (ipmitool for IPMI, sushy for Redfish) raises `BmcError`
carrying a classified `Failure` (kind, code, one-line message) for anything that went
wrong, so the provider never sees a protocol library's exception. Each protocol classifies
its own tool's failures in its module (ipmi.py: ipmitool's diagnostics; redfish.py: sushy's
error classes and HTTP status); this is what both share.
"""

from __future__ import annotations

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.bmc.shapes import UNREACHABLE, BmcNode
from clustermgr.providers.skeleton import Failure, Sdk


class BmcError(Exception):
    """One BMC call failed; `failure` says how (never with a password in it)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure

    @property
    def kind(self) -> ErrorKind:
        return self.failure.kind


def unreachable(node: BmcNode, timeout_s: float) -> BmcError:
    return BmcError(
        Failure(
            ErrorKind.TRANSIENT,
            UNREACHABLE,
            f"{node.describe()}: the BMC did not answer within {timeout_s:g} s",
        )
    )


def failure_of(exc: BaseException) -> Failure:
    if isinstance(exc, BmcError):
        return exc.failure
    return Failure(ErrorKind.OTHER, type(exc).__name__, type(exc).__name__)


BMC_SDK = Sdk(errors=(BmcError,), classify=failure_of)

"""What both BMC protocols share: power states, the driver Protocol, and BMC failures.

A driver (ipmitool for IPMI, sushy for Redfish) does one thing per call against one BMC
and raises `BmcError` carrying a classified `Failure` (kind, code, one-line message) for
anything that went wrong, so the provider never sees a protocol library's exception.
"""

from __future__ import annotations

import enum
from typing import Protocol

from clustermgr.errors import ErrorKind
from clustermgr.providers.base import InstanceState
from clustermgr.providers.bmc.nodes import BmcNode
from clustermgr.providers.skeleton import Failure, Sdk
from clustermgr.secret import Secret

UNREACHABLE = "BmcUnreachable"  # the code of every "the BMC did not answer in time"


class Power(enum.StrEnum):
    ON = "on"
    OFF = "off"
    POWERING_ON = "powering-on"
    POWERING_OFF = "powering-off"
    UNKNOWN = "unknown"  # the BMC answered something we cannot read as a power state


# A node that is off is like a terminated instance: nothing runs, nothing is billed, and a
# launch brings it back. A BMC that does not answer is UNKNOWN (see provider.py), never off.
INSTANCE_STATE = {
    Power.ON: InstanceState.RUNNING,
    Power.OFF: InstanceState.TERMINATED,
    Power.POWERING_ON: InstanceState.PENDING,
    Power.POWERING_OFF: InstanceState.STOPPING,
    Power.UNKNOWN: InstanceState.UNKNOWN,
}


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


def _failure_of(exc: BaseException) -> Failure:
    if isinstance(exc, BmcError):
        return exc.failure
    return Failure(ErrorKind.OTHER, type(exc).__name__, type(exc).__name__)


BMC_SDK = Sdk(errors=(BmcError,), classify=_failure_of)


class Driver(Protocol):
    """One BMC protocol. Every method makes bounded calls (the provider's bmc_timeout_s)."""

    def status(self, node: BmcNode, password: Secret) -> Power: ...

    def power_on(self, node: BmcNode, password: Secret) -> None: ...

    def soft_off(self, node: BmcNode, password: Secret) -> bool:
        """Ask the OS to shut down (ACPI soft-off, Redfish GracefulShutdown); False when the
        BMC offers no graceful shutdown."""
        ...

    def hard_off(self, node: BmcNode, password: Secret) -> None: ...

"""What the options models of provider kinds share (each kind's own model lives in its
package, `providers/<package>/kind.py`, and names the keys only its type takes).

`ApiOptions` is the base of a cloud whose calls wait on a remote API (`api_timeout_s`: the
watchdog compares it with the stall limit). `PoweredNodes` is what an on-prem kind's
options tell the rest of the configuration: the nodes it powers, their hardware classes,
and how long a power-off may take (slurm.conf's SuspendTimeout covers it).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import Field

from clustermgr.config.base import StrictModel


class ApiOptions(StrictModel):
    """A cloud API's keys: one call's wait for an answer (after the SDK's own retries of
    throttling and 5xx, a call that times out is a TRANSIENT error)."""

    api_timeout_s: float = Field(60.0, gt=0, le=600)


@runtime_checkable
class PoweredNodes(Protocol):
    """The options of a kind that powers on-prem nodes (`ProviderKind.onprem`)."""

    @property
    def node_names(self) -> list[str]:
        """Every node it powers, in configuration order."""
        ...

    @property
    def hardware_classes(self) -> frozenset[str]:
        """The instance types its nodes have (a template's instance_types name them)."""
        ...

    @property
    def power_off_s(self) -> float:
        """The longest a power-off may take (graceful shutdown, then hard off)."""
        ...

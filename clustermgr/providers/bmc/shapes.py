"""Shapes of the BMC providers, pure data and functions: which node has which BMC and
where its password comes from (`BmcNode`, from the provider's `bmc_nodes` options), power
states and what each is as an instance, a node as a `CloudInstance`.

The configuration lists `bmc_nodes` entries (a hostlist of nodes, the BMC address with an
optional `{node}`, port, Redfish system, hardware class) and names credentials on the
provider or per entry: `password_file` (the file's first line) or `password_env` (an
environment variable), always with a user name. A `BmcNode` holds where the password comes
from, never the password (client.py reads it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clustermgr.providers.base import CloudInstance, InstanceState
from clustermgr.providers.bmc.kind import BmcNodeSettings, bmc_options

if TYPE_CHECKING:
    from clustermgr.config import Credentials, ProviderSettings

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


@dataclass(frozen=True)
class BmcNode:
    """One node and how to reach its BMC (no password: see `password`)."""

    name: str
    address: str
    port: int
    system: str | None  # redfish: the ComputerSystem id or path; None: the BMC's only one
    instance_type: str
    username: str
    secret_file: Path | None
    secret_env: str | None

    @property
    def endpoint(self) -> str:
        """host:port, for messages and to group the nodes one BMC serves."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    def credential_source(self) -> str:
        """Where the password comes from, for messages (never the password)."""
        where = (
            f"file {self.secret_file}"
            if self.secret_file is not None
            else f"environment variable {self.secret_env}"
        )
        return f"user {self.username!r}, password from {where}"

    def describe(self) -> str:
        system = f" system {self.system}" if self.system else ""
        return f"node {self.name} (BMC {self.endpoint}{system})"


def bmc_nodes(settings: ProviderSettings) -> dict[str, BmcNode]:
    """The provider's nodes in configuration order, keyed by node name."""
    options = bmc_options(settings)
    nodes: dict[str, BmcNode] = {}
    for entry in options.bmc_nodes:
        creds = entry.credentials or settings.credentials
        for name in entry.node_names:
            nodes[name] = _node(entry, creds, name, options.default_port)
    return nodes


def _node(entry: BmcNodeSettings, creds: Credentials, name: str, default_port: int) -> BmcNode:
    return BmcNode(
        name=name,
        address=entry.address.replace("{node}", name),
        port=entry.port or default_port,
        system=None if entry.system is None else entry.system.replace("{node}", name),
        instance_type=entry.instance_type,
        username=creds.username or "",
        secret_file=creds.secret_file if creds.source == "password_file" else None,
        secret_env=creds.secret_env if creds.source == "password_env" else None,
    )


def instance_of(
    node: BmcNode, state: InstanceState, zone: str, tags: dict[str, str]
) -> CloudInstance:
    """A node as the instance the engine sees: its name is its id, its hardware class its
    instance type, the provider's region its zone."""
    return CloudInstance(
        instance_id=node.name,
        node_name=node.name,
        state=state,
        private_address=None,  # the BMC's address is not the node's
        instance_type=node.instance_type,
        zone=zone,
        lifecycle="on-demand",
        launch_time=None,  # a BMC does not say when the node was powered on
        tags=tags,
    )

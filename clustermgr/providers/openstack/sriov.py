"""SR-IOV for a template with `vnic_type = "direct"`: each server boots with a Neutron port
of its own, made on the template's network with `binding:vnic_type` direct, and the port
is deleted when the server is.

The shapes, from the API references:
- Neutron "Create port" (`POST /v2.0/ports`): `network_id`, `name`, `binding:vnic_type`
  (`direct` asks for an SR-IOV virtual function); openstacksdk's `Port.binding_vnic_type`.
- Nova "Create server": `networks: [{"port": PORT_ID}]` boots on that port.
- Nova "Delete server" detaches a port the user made but does not delete it (only the
  ports Nova made itself go with the server), so the server's metadata names its port
  (`cm-sriov-port`) and terminate deletes it after the server.

The port is named as the server is (`server_name`: cluster and node), so a retry after a
server that went to ERROR finds the port again and reuses it once Nova has let it go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
PORT_KEY = "cm-sriov-port"  # server metadata: the id of the port to delete with it


class Neutron(Protocol):
    def service(self, name: str) -> Any: ...

    def call(self, what: str, fn: Callable[[], T], operation: str = "") -> T: ...


def ensure_port(nova: Neutron, network_id: str, name: str) -> str:
    """The id of a free direct port named `name` on the network, made if there is none."""
    network = nova.service("network")

    def ensure() -> Any:
        for port in network.ports(name=name, network_id=network_id):
            if not port.device_id and port.binding_vnic_type == "direct":
                return port
        return network.create_port(network_id=network_id, name=name, binding_vnic_type="direct")

    port: Any = nova.call(f"making SR-IOV port {name}", ensure)
    return str(port.id)


def delete_port(nova: Neutron, port_id: str) -> None:
    """Delete the server's port; one that is already gone is fine (ignore_missing)."""
    network = nova.service("network")
    nova.call(
        f"deleting SR-IOV port {port_id}",
        lambda: network.delete_port(port_id, ignore_missing=True),
    )

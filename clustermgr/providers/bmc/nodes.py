"""Which node has which BMC, and where each BMC password comes from (never the password).

The configuration lists `bmc_nodes` entries (a hostlist of nodes, the BMC address with an
optional `{node}`, port, Redfish system, hardware class) and names credentials on the
provider or per entry: `password_file` (the file's first line) or `password_env` (an
environment variable), always with a user name. The password is read on every use, so a
rotated file takes effect without a restart, and it only ever travels inside a `Secret`,
whose repr and str are masked, to the one call that hands it to the BMC client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clustermgr.errors import ProviderError
from clustermgr.providers.bmc.kind import BmcNodeSettings, bmc_options
from clustermgr.providers.skeleton import auth_error
from clustermgr.secret import Secret

if TYPE_CHECKING:
    from clustermgr.config import Credentials, ProviderSettings


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


def read_password(node: BmcNode, provider: str) -> Secret:
    """The node's BMC password; AUTH naming the source (never the content) when it cannot be
    read or is empty."""
    if node.secret_file is not None:
        try:
            lines = node.secret_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise _missing(node, provider, f"cannot read: {why}", "SecretUnreadable") from None
        value = lines[0].strip() if lines else ""
    else:
        value = os.environ.get(node.secret_env or "", "").strip()
    if not value:
        raise _missing(node, provider, "the password is empty or unset", "SecretMissing")
    return Secret(value)


def _missing(node: BmcNode, provider: str, why: str, code: str) -> ProviderError:
    return auth_error(
        provider,
        node.credential_source(),
        f"{node.describe()}: {why}",
        code,
        "BMC password unavailable ({source}): {message}",
    )


def credential_summary(nodes: dict[str, BmcNode]) -> str:
    """The distinct credential sources of these nodes, for messages."""
    sources = sorted({node.credential_source() for node in nodes.values()})
    if len(sources) <= 2:
        return "; ".join(sources)
    return f"{sources[0]}; and {len(sources) - 1} more sources"

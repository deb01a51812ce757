"""The BMC client side both protocols share: the `Driver` Protocol (one call against one
BMC, bounded by the provider's `bmc_timeout_s`; ipmi.py and redfish.py implement it) and
where each BMC password comes from, read on every use, so a rotated file takes effect
without a restart. A password only ever travels inside a `Secret`, whose repr and str are
masked, to the one call that hands it to the BMC client.
"""

from __future__ import annotations

import os
from typing import Protocol

from clustermgr.core.errors import ProviderError
from clustermgr.core.secret import Secret
from clustermgr.providers.bmc.shapes import BmcNode, Power
from clustermgr.providers.skeleton import auth_error


class Driver(Protocol):
    """One BMC protocol. Every method makes bounded calls (the provider's bmc_timeout_s)."""

    def status(self, node: BmcNode, password: Secret) -> Power: ...

    def power_on(self, node: BmcNode, password: Secret) -> None: ...

    def soft_off(self, node: BmcNode, password: Secret) -> bool:
        """Ask the OS to shut down (ACPI soft-off, Redfish GracefulShutdown); False when the
        BMC offers no graceful shutdown."""
        ...

    def hard_off(self, node: BmcNode, password: Secret) -> None: ...


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

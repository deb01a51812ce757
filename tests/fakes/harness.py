"""What each cloud fake offers the provider contract suite (test_provider_contract.py).

Every fake module (tests/fakes/<type>_harness.py) exposes
`contract_harness(tmp_path: Path) -> ContextManager[ContractHarness]` that starts its fake
server(s) on 127.0.0.1, yields the harness, and stops everything it started by pid/handle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import LaunchSpec, Provider


class ContractHarness(Protocol):
    provider_type: str

    def provider(self) -> Provider:
        """A provider built by the real registry from ProviderSettings pointing at the fake."""
        ...

    def bad_credentials_provider(self) -> Provider:
        """Same, but with credentials the fake rejects (expect ErrorKind.AUTH)."""
        ...

    def spec(self, node_names: Sequence[str], instance_types: Sequence[str] = ()) -> LaunchSpec:
        """A valid launch spec for this fake; instance_types overrides the default ones."""
        ...

    def unknown_instance_type(self) -> str:
        """An instance type / flavor name the fake does not know (expect INVALID)."""
        ...

    def fail_next_launches(self, kind: ErrorKind, attempts: int = 1) -> None:
        """Make the next `attempts` launch calls at the cloud fail with an error of `kind`
        (CAPACITY, QUOTA or THROTTLED), as the real cloud would signal it."""
        ...

    def limit_capacity(self, instances: int, instance_type: str | None = None) -> None:
        """From now on the fake can start only `instances` more instances (of
        `instance_type`, when named; the others as before): a partial launch."""
        ...

    def secrets(self) -> Sequence[str]:
        """Secret strings the provider was configured with; they must never leak."""
        ...

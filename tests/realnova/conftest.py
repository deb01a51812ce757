"""The real-Nova layer: one control plane (tests/services/openstack) for the whole session."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.conftest import cannot_run
from tests.e2e.conftest import lab_dir  # noqa: F401 - the e2e labs' directory, here too
from tests.services.openstack import controlplane
from tests.services.openstack.controlplane import ControlPlane


@pytest.fixture(scope="session")
def plane() -> Iterator[ControlPlane]:
    why = controlplane.missing()
    if why:
        cannot_run(f"real Nova: {why}")
    began = time.monotonic()
    made = controlplane.start()
    print(f"\nreal Nova control plane up in {time.monotonic() - began:.0f} s: {made.timings}")
    try:
        yield made
    finally:
        controlplane.stop(made)

"""A cloud call that hangs is named in the watchdog's stall line, through each SDK's own
hooks (botocore's events, an azure-core pipeline policy), and its answer is progress.

The real provider (built by the registry) against its cloud's fake; the fake holds the
listing request until the test releases it (tests/fakes/gate.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from clustermgr.core.progress_marks import PROGRESS
from tests.fakes import aws_harness, azure_harness
from tests.fakes.gate import Gate

# harness module, the listing request its fake holds, what the stall line must name
CLOUDS: dict[str, tuple[Callable[[Path], AbstractContextManager[Any]], str, str]] = {
    "aws": (aws_harness.contract_harness, "DescribeInstances", "EC2 DescribeInstances"),
    "azure": (azure_harness.contract_harness, "GET /subscriptions/", "Azure GET virtualMachines"),
}


@pytest.fixture(params=sorted(CLOUDS))
def cloud(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str, str]]:
    make, hold, named = CLOUDS[request.param]
    with make(tmp_path) as harness:
        yield harness, hold, named


def test_a_hung_cloud_call_is_named_and_its_answer_is_progress(
    cloud: tuple[Any, str, str],
) -> None:
    harness, hold, named = cloud
    provider = harness.provider()
    provider.list_instances()  # the client is built, credentials fetched
    gate: Gate = harness.fake.hold_next(hold)
    listed = threading.Event()

    def listing() -> None:
        provider.list_instances()
        listed.set()

    with PROGRESS.running("scale cycle"):
        caller = threading.Thread(target=listing, daemon=True)
        caller.start()
        try:
            assert gate.reached.wait(30), "the listing never reached the fake"
            stall = PROGRESS.stall(0.2)
            while stall is None:
                stall = PROGRESS.stall(0.2)
            assert stall.activity == "scale cycle"
            assert stall.step.startswith(f"provider {provider.name}: {named}"), stall.step
        finally:
            gate.release()
        assert listed.wait(30)
        caller.join(10)
        assert PROGRESS.stall(5) is None  # answered: progress

"""Launching into an Azure capacity reservation group (issue 24 item 2), through the real
SDK against FakeAzure, whose groups have finite members (tests/fakes/azure_reservations.py):
the VM body names the group, what the group holds is read from its members' instance views,
and a launch beyond its free capacity either goes on (Azure overallocates; said in a log
line) or is held back with a reason naming the group."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.azure.provider import AzureProvider
from clustermgr.providers.base import LaunchSpec, ReservationTarget
from tests.fakes.azure_harness import CLUSTER, DEFAULT_TYPES, AzureHarness, contract_harness

pytestmark = pytest.mark.integration

GROUP = "h100-crg"


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[AzureHarness]:
    with contract_harness(tmp_path) as made:
        made.fake.add_capacity_reservation_group(GROUP, {"cr-a": (DEFAULT_TYPES[0], 2)})
        yield made


def spec(harness: AzureHarness, count: int, fallback: bool) -> LaunchSpec:
    names = [f"g-{i:03d}" for i in range(1, count + 1)]
    made = harness.spec(names, [DEFAULT_TYPES[0]])
    return replace(made, reservation=ReservationTarget("group", GROUP, fallback=fallback))


def test_vms_join_the_group_and_its_figures_follow(harness: AzureHarness) -> None:
    provider = AzureProvider(harness.settings(), CLUSTER)
    result = provider.launch(spec(harness, 1, True), 1, "req-crg")
    assert result.ok, result.errors
    vm = harness.fake.vm(harness.fake.vm_names()[0])
    group_id = vm["properties"]["capacityReservation"]["capacityReservationGroup"]["id"]
    assert group_id.endswith(
        f"/resourceGroups/{harness.fake.resource_group}/providers/"
        f"Microsoft.Compute/capacityReservationGroups/{GROUP}"
    )
    (facts,) = provider.reservations([ReservationTarget("group", GROUP)])
    assert (facts.kind, facts.instance_type) == ("group", DEFAULT_TYPES[0])
    assert (facts.total, facts.in_use, facts.available) == (2, 1, 1)


def test_beyond_the_group_goes_on_and_says_so(
    harness: AzureHarness, caplog: pytest.LogCaptureFixture
) -> None:
    provider = AzureProvider(harness.settings(), CLUSTER)
    with caplog.at_level(logging.WARNING, logger="clustermgr.providers.azure.provider"):
        result = provider.launch(spec(harness, 3, True), 3, "req-over")
    assert result.ok and len(result.instances) == 3
    rg = harness.fake.resource_group
    assert f"group {GROUP} (resource group {rg}) has 2 free; 1 of 3 VM(s) go beyond" in caplog.text
    assert "(reservation_fallback = on-demand)" in caplog.text


def test_no_fallback_launches_only_what_the_group_holds_and_names_it(
    harness: AzureHarness,
) -> None:
    provider = AzureProvider(harness.settings(), CLUSTER)
    result = provider.launch(spec(harness, 3, False), 3, "req-none")
    assert len(result.instances) == 2 and result.missing == 1
    (error,) = result.errors
    assert error.kind is ErrorKind.CAPACITY and error.code == "CapacityReservationGroupFull"
    rg = harness.fake.resource_group
    assert f"group {GROUP} (resource group {rg}) has 2 of 2 free; 1 node(s) not launched" in (
        error.message
    )
    assert "(reservation_fallback = none)" in error.reason()
    assert len(harness.fake.vm_names()) == 2


def test_a_job_launched_whole_that_the_group_cannot_hold_starts_nothing_and_says_so(
    harness: AzureHarness,
) -> None:
    """All or nothing with reservation_fallback = none: a group with room for 2 of the
    job's 3 nodes creates no VM, and the reason counts the job's 3 nodes."""
    provider = AzureProvider(harness.settings(), CLUSTER)
    result = provider.launch(replace(spec(harness, 3, False), all_or_nothing=True), 3, "req-aon")
    assert result.instances == [] and result.missing == 3
    assert harness.fake.vm_names() == []
    held = next(e for e in result.errors if e.code == "CapacityReservationGroupFull")
    assert held.count == 3
    assert "has 2 of 2 free; the job's 3 node(s) not launched, all or nothing" in held.message
    assert result.errors[0].code == "AllOrNothing", result.errors

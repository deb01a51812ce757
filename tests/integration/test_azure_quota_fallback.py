"""Azure cores quotas through the real SDK against FakeAzure: a quota that binds one VM family
fails that size only (the template's next size, of another family, starts in the same
launch); the regional total fails every size (no other PUT is made)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind
from tests.fakes.azure_harness import AzureHarness, contract_harness

pytestmark = pytest.mark.integration

ND96 = "Standard_ND96asr_v4"  # standardNDASv4_A100Family, 96 cores
NC24 = "Standard_NC24ads_A100_v4"  # StandardNCADSA100v4Family, 24 cores
D4 = "Standard_D4s_v3"  # standardDSv3Family, 4 cores
D2 = "Standard_D2s_v3"  # standardDSv3Family, 2 cores


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[AzureHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def vm_puts(harness: AzureHarness) -> int:
    return len(harness.fake.requests("PUT", "/virtualMachines/"))


def test_a_family_cores_quota_fails_that_size_and_the_next_family_starts(
    harness: AzureHarness,
) -> None:
    harness.fake.limit_cores(0, family="standardNDASv4_A100Family")
    result = harness.provider().launch(harness.spec(["n-001"], [ND96, NC24]), 1, "req-family")
    assert [i.instance_type for i in result.instances] == [NC24]
    [error] = result.errors
    assert (error.kind, error.instance_type) == (ErrorKind.QUOTA, ND96)
    assert "standardNDASv4_A100Family Cores quota" in error.message
    assert vm_puts(harness) == 2


def test_a_smaller_size_of_the_same_family_that_fits_its_quota_starts(
    harness: AzureHarness,
) -> None:
    harness.fake.limit_cores(2, family="standardDSv3Family")
    result = harness.provider().launch(harness.spec(["n-001"], [D4, D2]), 1, "req-smaller")
    assert [i.instance_type for i in result.instances] == [D2]
    assert [(e.kind, e.instance_type) for e in result.errors] == [(ErrorKind.QUOTA, D4)]


def test_the_regional_cores_quota_fails_every_size(harness: AzureHarness) -> None:
    harness.fake.limit_cores(0)
    result = harness.provider().launch(harness.spec(["n-001"], [ND96, NC24]), 1, "req-regional")
    assert result.instances == []
    [error] = result.errors
    assert error.kind is ErrorKind.QUOTA and "Total Regional Cores quota" in error.message
    assert vm_puts(harness) == 1  # no other size is tried: it would fail the same way


def test_a_family_quota_moves_an_all_or_nothing_batch_to_the_next_family(
    harness: AzureHarness,
) -> None:
    harness.fake.limit_cores(96, family="standardNDASv4_A100Family")  # room for one, not two
    spec = replace(harness.spec(["n-001", "n-002"], [ND96, NC24]), all_or_nothing=True)
    result = harness.provider().launch(spec, 2, "req-whole")
    assert sorted(i.instance_type for i in result.instances) == [NC24, NC24]
    assert ErrorKind.QUOTA in {e.kind for e in result.errors}
    assert sorted(harness.fake.vm_names()) == sorted(i.instance_id for i in result.instances)

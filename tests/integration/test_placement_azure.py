"""Per-launch proximity placement groups on Azure, through azure-mgmt-compute against the
ARM fake (tests/fakes/azure_placement.py): made before the VMs, each VM in it, none for one
VM, listed with its request, deleted."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.providers.azure.provider import AzureProvider
from clustermgr.providers.launch_groups import PlacementGroups, group_name
from tests.fakes.azure_harness import AzureHarness, contract_harness

pytestmark = pytest.mark.integration


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[AzureHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def test_a_multi_vm_launch_goes_into_a_proximity_group_of_its_own(harness: AzureHarness) -> None:
    provider = harness.provider()
    assert isinstance(provider, AzureProvider) and isinstance(provider, PlacementGroups)
    spec = replace(harness.spec(["pp-1", "pp-2"]), launch_group="affinity")
    result = provider.launch(spec, 2, "r-00000000000000d1")
    assert result.ok, result.errors
    name = group_name(harness.cluster, "azure-gpu", "r-00000000000000d1", 80)
    assert harness.fake.ppg_names() == [name]
    assert harness.fake.ppg_members(name) == sorted(i.instance_id for i in result.instances)
    (listed,) = provider.placement_groups()
    assert (listed.name, listed.request_id) == (name, "r-00000000000000d1")
    provider.terminate([i.instance_id for i in result.instances], "stop")
    assert provider.delete_placement_group(listed) is True
    assert harness.fake.ppg_names() == [] and provider.placement_groups() == []

    single = replace(harness.spec(["pp-3"]), launch_group="affinity")
    assert provider.launch(single, 1, "r-00000000000000d2").ok
    assert harness.fake.ppg_names() == []

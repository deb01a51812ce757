"""`infiniband = true` on an Azure template, through the Azure SDK against the fake ARM:
only RDMA sizes (resource SKU capability RdmaEnabled) are launched, each VM in the
template's proximity placement group with an accelerated-networking NIC."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.azure.provider import AzureProvider
from clustermgr.providers.base import LaunchSpec
from tests.fakes.azure_harness import CLUSTER, AzureHarness, contract_harness
from tests.integration.test_azure_provider import nic_of

pytestmark = pytest.mark.integration


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[AzureHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def ib_spec(harness: AzureHarness, types: list[str]) -> LaunchSpec:
    ppg = (
        f"/subscriptions/{harness.fake.subscription_id}/resourceGroups/{harness.fake.resource_group}"
        "/providers/Microsoft.Compute/proximityPlacementGroups/hpc-ib"
    )
    return replace(
        harness.spec(["ib-001", "ib-002"], types), placement_group=ppg, fabric="infiniband"
    )


def test_infiniband_vms_are_rdma_sizes_in_the_ppg_with_accelerated_nics(
    harness: AzureHarness,
) -> None:
    provider = AzureProvider(harness.settings(), CLUSTER)
    spec = ib_spec(harness, ["Standard_HB120rs_v3", "Standard_ND96asr_v4"])
    result = provider.launch(spec, 2, "req-ib")
    assert result.ok, result.errors
    for instance in result.instances:
        assert instance.instance_type == "Standard_HB120rs_v3"
        props = harness.fake.vm(instance.instance_id)["properties"]
        assert props["proximityPlacementGroup"] == {"id": spec.placement_group}
        nic = harness.fake.nic(nic_of(harness.fake, instance.instance_id))
        assert nic["properties"]["enableAcceleratedNetworking"] is True
    plain = provider.launch(harness.spec(["n-001"], ["Standard_D2s_v3"]), 1, "req-plain")
    assert plain.ok, plain.errors
    nic = harness.fake.nic(nic_of(harness.fake, plain.instances[0].instance_id))
    assert "enableAcceleratedNetworking" not in nic["properties"]


def test_a_size_without_infiniband_is_refused_before_anything_is_made(
    harness: AzureHarness,
) -> None:
    provider = AzureProvider(harness.settings(), CLUSTER)
    spec = ib_spec(harness, ["Standard_HB120rs_v3", "Standard_NC24ads_A100_v4"])
    with pytest.raises(ProviderError) as caught:
        provider.launch(spec, 2, "req-no-ib")
    assert caught.value.kind is ErrorKind.INVALID
    assert "Standard_NC24ads_A100_v4" in str(caught.value)
    assert "RdmaEnabled" in str(caught.value)
    assert harness.fake.vm_names() == [] and harness.fake.nic_names() == []

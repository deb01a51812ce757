"""Azure-specific behaviour beyond the contract, through the real SDK against FakeAzure:
LRO polling, nextLink paging, spot, cleanup of VM + NIC + OS disk, names, 404/409/429."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.azure.provider import AzureProvider
from clustermgr.providers.azure.shapes import TAG_NIC_MADE, names_for
from clustermgr.providers.base import TAG_CLUSTER, TAG_NODE, InstanceState, Provider
from tests.fakes.azure_answers import SHAPES
from tests.fakes.azure_fake import FakeAzure
from tests.fakes.azure_harness import CLUSTER, AzureHarness, ca_bundle_env, contract_harness

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[AzureHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def provider_of(harness: AzureHarness, **overrides: Any) -> AzureProvider:
    provider = AzureProvider(harness.settings(**overrides), CLUSTER)
    assert provider.name == "azure-test" and provider.kind == "azure"
    return provider


def test_vm_creation_is_polled_through_azure_async_operation(tmp_path: Path) -> None:
    with contract_harness(tmp_path, lro_polls=3) as h:
        result = provider_of(h).launch(h.spec(["n-001"]), 1, "req-lro")
        assert result.ok, result.errors
        polls = h.fake.requests("GET", "/operations/")
        assert len(polls) >= 4  # 3 x InProgress, then Succeeded
        (name,) = h.fake.vm_names()
        assert h.fake.vm(name)["properties"]["provisioningState"] == "Succeeded"
        assert result.instances[0].state is InstanceState.RUNNING


def test_listing_follows_next_links(harness: AzureHarness) -> None:
    provider = provider_of(harness)
    nodes = [f"n-{i:03d}" for i in range(5)]
    assert provider.launch(harness.spec(nodes), 5, "req-page").ok
    group = f"{harness.fake.resource_group}/providers/Microsoft.Compute/virtualMachines"
    before = len(harness.fake.requests("GET", group))
    listed = provider.list_instances()
    pages = len(harness.fake.requests("GET", group)) - before
    assert pages == 3  # page size 2: 2 + 2 + 1
    assert sorted(i.node_name or "" for i in listed.values()) == nodes
    assert all(i.private_address and i.private_address.startswith("10.0.") for i in listed.values())


def test_listing_ignores_other_clusters_vms(harness: AzureHarness) -> None:
    mine = provider_of(harness)
    other = AzureProvider(harness.settings(name="other"), "other-cluster")
    assert other.launch(harness.spec(["x-001"]), 1, "req-other").ok
    assert mine.list_instances() == {}
    assert len(other.list_instances()) == 1


def test_spot_priority_with_delete_eviction_and_max_price(harness: AzureHarness) -> None:
    provider = provider_of(harness)
    spec = harness.spec(["s-001"])
    spot = type(spec)(**{**spec.__dict__, "market": "spot", "max_spot_price": 2.25})
    result = provider.launch(spot, 1, "req-spot")
    assert result.ok, result.errors
    vm = harness.fake.vm(result.instances[0].instance_id)["properties"]
    assert (vm["priority"], vm["evictionPolicy"]) == ("Spot", "Delete")
    assert vm["billingProfile"] == {"maxPrice": 2.25}
    (listed,) = provider.list_instances().values()
    assert listed.lifecycle == "spot"
    harness.fake.evict(listed.instance_id)  # eviction policy Delete: the VM is simply gone
    assert provider.list_instances() == {}


def test_vm_carries_tags_user_data_and_delete_options(harness: AzureHarness) -> None:
    result = provider_of(harness).launch(harness.spec(["n-001"]), 1, "req-body")
    vm = harness.fake.vm(result.instances[0].instance_id)
    assert vm["tags"][TAG_NODE] == "n-001"
    props = vm["properties"]
    assert props["osProfile"]["customData"]  # base64 of the template's user data
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert props["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] == "Delete"


def nic_of(fake: FakeAzure, vm_name: str) -> str:
    ref = fake.vm(vm_name)["properties"]["networkProfile"]["networkInterfaces"][0]
    return str(ref["id"]).rsplit("/", 1)[-1]


def nics_settle(provider: Provider, fake: FakeAzure, expected: list[str]) -> list[str]:
    """The fake's NICs once the provider's listings have retried what Azure held (5 s)."""
    deadline = time.monotonic() + 5
    while fake.nic_names() != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        provider.list_instances()
    return fake.nic_names()


@pytest.mark.parametrize("honor", [True, False])
def test_terminate_removes_vm_nic_and_os_disk(tmp_path: Path, honor: bool) -> None:
    # honor=False: Azure keeps the NIC, reserved for its deleted VM (NicReservedForAnotherVm)
    with contract_harness(tmp_path, honor_delete_options=honor, nic_reservation_s=0.5) as h:
        provider = provider_of(h)
        result = provider.launch(h.spec(["n-001", "n-002"]), 2, "req-del")
        assert len(h.fake.nic_names()) == 2 and len(h.fake.disk_names()) == 2
        doomed, kept = (i.instance_id for i in result.instances)
        provider.terminate([doomed, "never-existed"], "req-del-2")
        assert h.fake.vm_names() == [kept]
        assert nics_settle(provider, h.fake, [nic_of(h.fake, kept)]) == [nic_of(h.fake, kept)]
        assert h.fake.disk_names() == [f"{kept}-osdisk"]


def test_names_are_deterministic_and_retries_reuse_them(harness: AzureHarness) -> None:
    provider = provider_of(harness)
    first = provider.launch(harness.spec(["n-001"]), 1, "req-name")
    expected = names_for(CLUSTER, "n-001", "req-name").vm
    assert [i.instance_id for i in first.instances] == [expected]
    puts = len(harness.fake.requests("PUT", "/virtualMachines/"))
    again = provider.launch(harness.spec(["n-001"]), 1, "req-name")
    assert [i.instance_id for i in again.instances] == [expected]
    assert len(harness.fake.requests("PUT", "/virtualMachines/")) == puts  # GET found it


def test_capacity_falls_back_to_the_next_type_and_cleans_the_failed_vm(
    harness: AzureHarness,
) -> None:
    provider = provider_of(harness)
    harness.fake.fail_next_vm_puts("AllocationFailed", attempts=1)
    result = provider.launch(harness.spec(["n-001"]), 1, "req-fallback")
    assert result.ok
    assert result.instances[0].instance_type == "Standard_ND96asr_v4"
    assert [(e.kind, e.code, e.instance_type) for e in result.errors] == [
        (ErrorKind.CAPACITY, "AllocationFailed", "Standard_NC24ads_A100_v4")
    ]
    assert harness.fake.vm_names() == [result.instances[0].instance_id]  # no Failed VM left


@pytest.mark.parametrize("shape", ["OperationNotAllowed", "LowPriorityCores"])
def test_quota_does_not_try_other_types_and_leaves_nothing(
    harness: AzureHarness, shape: str
) -> None:
    # the real answers: 409 OperationNotAllowed whose message names the quota (regional
    # cores, spot's LowPriorityCores), nothing structured; a family's cores quota fails that
    # size only (test_azure_quota_fallback.py)
    harness.fake.fail_next_vm_puts(shape, attempts=5)
    spec = harness.spec(["n-001"])
    if shape == "LowPriorityCores":
        spec = replace(spec, market="spot")
    result = provider_of(harness).launch(spec, 1, "req-quota")
    assert [(e.kind, e.code) for e in result.errors] == [(ErrorKind.QUOTA, "OperationNotAllowed")]
    assert harness.fake.vm_names() == [] and harness.fake.nic_names() == []


def test_operation_not_allowed_that_names_no_quota_is_other(harness: AzureHarness) -> None:
    vms = "/providers/microsoft.compute/virtualmachines/"
    harness.fake.fail_next("PUT", vms, 409, "OperationNotAllowed", 1, "VM x is being deleted.")
    result = provider_of(harness).launch(harness.spec(["n-002"]), 1, "req-refused")
    assert [(e.kind, e.code) for e in result.errors] == [(ErrorKind.OTHER, "OperationNotAllowed")]
    assert harness.fake.vm_names() == []


def test_wrapped_zonal_allocation_failure_falls_back_to_the_next_zone_and_size(
    harness: AzureHarness,
) -> None:
    # ResourceOperationFailure around ZonalAllocationFailed, in the operation's final status
    provider = provider_of(harness)
    harness.fake.fail_next_vm_puts("WrappedZonalAllocationFailed", attempts=2)
    spec = replace(harness.spec(["n-001"]), zones=("1", "2"))
    result = provider.launch(spec, 1, "req-wrapped")
    assert result.ok and result.instances[0].instance_type == "Standard_ND96asr_v4"
    assert [(e.kind, e.code, e.zone) for e in result.errors] == [
        (ErrorKind.CAPACITY, "ZonalAllocationFailed", "1"),
        (ErrorKind.CAPACITY, "ZonalAllocationFailed", "2"),
    ]


def test_a_failed_vms_reserved_nic_is_not_reused_and_is_deleted_once_azure_lets_it_go(
    tmp_path: Path,
) -> None:
    with contract_harness(tmp_path, nic_reservation_s=1.0) as h:
        provider = provider_of(h)
        h.fake.fail_next_vm_puts("AllocationFailed", attempts=1)
        result = provider.launch(h.spec(["n-001"]), 1, "req-nic")
        assert result.ok  # the second size, with a NIC of its own (the first is reserved)
        vm = result.instances[0].instance_id
        assert len(h.fake.nic_names()) == 2
        assert h.fake.requests("DELETE", "/networkInterfaces/")  # tried, refused: reserved
        assert nics_settle(provider, h.fake, [nic_of(h.fake, vm)]) == [nic_of(h.fake, vm)]


def test_a_nic_a_crash_left_behind_is_swept_by_the_listing_once_it_is_old(
    harness: AzureHarness,
) -> None:
    provider = provider_of(harness)
    assert isinstance(provider, AzureProvider)
    body: Any = {
        "location": harness.fake.location,
        "tags": {TAG_CLUSTER: CLUSTER, TAG_NIC_MADE: str(int(time.time()) - 3600)},
        "properties": {
            "ipConfigurations": [
                {"name": "ipconfig1", "properties": {"subnet": {"id": harness.fake.vnet_subnet}}}
            ]
        },
    }
    group, nics = harness.fake.resource_group, provider.network().network_interfaces
    nics.begin_create_or_update(group, "contract-n-009-0badf00d-nic-abcdef", body).result()
    body["tags"][TAG_NIC_MADE] = str(int(time.time()))  # just made by another process
    nics.begin_create_or_update(group, "contract-n-010-0badf00d-nic-abcdef", body).result()
    body["tags"] = {TAG_CLUSTER: "someone-else", TAG_NIC_MADE: "0"}
    nics.begin_create_or_update(group, "theirs-nic-abcdef", body).result()
    provider.list_instances()
    assert harness.fake.nic_names() == ["contract-n-010-0badf00d-nic-abcdef", "theirs-nic-abcdef"]


def test_a_throttled_put_without_retry_after_is_backed_off_and_retried(
    harness: AzureHarness,
) -> None:
    # Compute's 429 OperationNotAllowed + TooManyRequests, with no Retry-After header
    harness.fake.fail_next_vm_puts("TooManyRequests", attempts=2, retry_after=None)
    result = provider_of(harness).launch(harness.spec(["n-001"]), 1, "req-throttle")
    assert result.ok and result.errors == []
    assert len(harness.fake.requests("PUT", "/virtualMachines/")) == 3


def test_catalog_leaves_out_restricted_sizes_and_launch_skips_restricted_zones_and_spot(
    harness: AzureHarness,
) -> None:
    provider = provider_of(harness)
    names = {t.name for t in provider.catalog()}
    assert "Standard_ND40rs_v2" not in names and "Standard_ND96isr_H100_v5" in names
    # zone 3 of the H100 size is restricted for this subscription: not even tried
    spec = replace(
        harness.spec(["n-001"], ["Standard_ND96isr_H100_v5", "Standard_D2s_v3"]), zones=("3",)
    )
    result = provider.launch(spec, 1, "req-zone")
    assert result.ok and result.instances[0].instance_type == "Standard_D2s_v3"
    assert [(e.kind, e.code, e.instance_type) for e in result.errors] == [
        (ErrorKind.CAPACITY, "SkuNotAvailable", "Standard_ND96isr_H100_v5")
    ]
    assert not [p for _, p in harness.fake.requests("PUT") if "zones" in p]
    # no spot VMs of a size that is not LowPriorityCapable: the next size, no PUT for it
    puts = len(harness.fake.requests("PUT", "/virtualMachines/"))
    spot = replace(
        harness.spec(["n-002"], ["Standard_HB120rs_v3", "Standard_D4s_v3"]), market="spot"
    )
    result = provider.launch(spot, 1, "req-spot")
    assert result.ok and result.instances[0].instance_type == "Standard_D4s_v3"
    assert len(harness.fake.requests("PUT", "/virtualMachines/")) == puts + 1


def test_power_state_comes_from_the_status_only_listing(harness: AzureHarness) -> None:
    provider = provider_of(harness)
    result = provider.launch(harness.spec(["n-001"]), 1, "req-power")
    vm = result.instances[0].instance_id
    harness.fake.set_power_state(vm, "deallocated")
    assert provider.list_instances()[vm].state is InstanceState.TERMINATED
    assert harness.fake.requests("GET", "/providers/Microsoft.Compute/virtualMachines")


def test_a_role_scoped_to_the_resource_group_lists_without_power_states(
    harness: AzureHarness,
) -> None:
    provider = provider_of(harness)
    vm = provider.launch(harness.spec(["n-001"]), 1, "req-scoped").instances[0].instance_id
    subscription_vms = (
        f"/subscriptions/{harness.fake.subscription_id}/providers/microsoft.compute/virtualmachines"
    )
    harness.fake.fail_next("GET", subscription_vms, 403, "AuthorizationFailed", attempts=1)
    assert provider.list_instances()[vm].state is InstanceState.RUNNING  # provisioningState
    assert len(harness.fake.requests("GET", subscription_vms)) == 1
    provider.list_instances()
    assert len(harness.fake.requests("GET", subscription_vms)) == 1  # not asked again


def test_conflict_409_is_a_typed_error_not_an_exception(harness: AzureHarness) -> None:
    harness.fake.fail_next_vm_puts("Conflict", attempts=1)
    result = provider_of(harness).launch(harness.spec(["n-001"]), 1, "req-409")
    assert [(e.kind, e.code) for e in result.errors] == [(ErrorKind.TRANSIENT, "Conflict")]


def test_throttled_list_is_retried_then_raised_as_throttled(harness: AzureHarness) -> None:
    provider = provider_of(harness)
    shape = SHAPES["TooManyRequests"]  # 429 OperationNotAllowed, TooManyRequests in details
    throttle = ("GET", "/virtualmachines", 429, shape.code)
    more = {"message": shape.message, "extra": shape.extra}
    harness.fake.fail_next(*throttle, 2, retry_after="0.01", **more)
    assert provider.list_instances() == {}  # two 429s, retried by the SDK
    harness.fake.fail_next(*throttle, 50, retry_after="0.01", **more)
    with pytest.raises(ProviderError) as caught:
        provider.list_instances()
    assert caught.value.kind is ErrorKind.THROTTLED  # not OTHER: the launch backs off
    assert caught.value.code == "OperationNotAllowed"


def test_unknown_image_is_invalid_naming_the_field(harness: AzureHarness) -> None:
    spec = harness.spec(["n-001"])
    bad = type(spec)(**{**spec.__dict__, "image": "Canonical:nope:server:latest"})
    with pytest.raises(ProviderError) as caught:
        provider_of(harness).launch(bad, 1, "req-img")
    assert caught.value.kind is ErrorKind.INVALID
    assert "image" in str(caught.value) and spec.template in str(caught.value)
    assert harness.fake.requests("PUT") == []


def test_launches_run_concurrently(harness: AzureHarness) -> None:
    provider = provider_of(harness)
    provider.catalog()
    harness.fake.slow(0.4, path_contains="/virtualmachines/n")
    nodes = [f"n-{i:03d}" for i in range(8)]
    started = time.monotonic()
    result = provider.launch(harness.spec(nodes), 8, "req-par")
    elapsed = time.monotonic() - started
    assert result.ok, result.errors
    assert elapsed < 8 * 0.4 * 2 / 2  # GET + PUT per node, serially ~6 s


def test_auth_failure_on_launch_names_the_source_not_the_secret(harness: AzureHarness) -> None:
    provider = harness.bad_credentials_provider()
    with pytest.raises(ProviderError) as caught:
        provider.launch(harness.spec(["n-001"]), 1, "req-auth")
    text = str(caught.value)
    assert caught.value.kind is ErrorKind.AUTH and "azure-bad" in text
    assert "client secret from file" in text and "azure-wrong-secret" in text
    assert all(secret not in text for secret in harness.secrets())
    token, *rest = provider.check()
    assert not token.ok and rest == []


def test_check_lines(harness: AzureHarness) -> None:
    checks = provider_of(harness).check()
    assert [c.name for c in checks] == ["token", "resource group", "resource SKUs"]
    assert all(c.ok for c in checks)
    # Standard_ND40rs_v2 is restricted in the region for this subscription: not offered
    assert "6 VM sizes" in checks[2].detail and "3 with GPUs" in checks[2].detail


def test_missing_resource_group_fails_check_without_raising(harness: AzureHarness) -> None:
    checks = provider_of(harness, resource_group="rg-missing").check()
    group = next(c for c in checks if c.name == "resource group")
    assert not group.ok and "ResourceGroupNotFound" in group.detail


def test_secret_from_environment_variable(harness: AzureHarness, monkeypatch: Any) -> None:
    monkeypatch.setenv("CM_AZURE_SECRET", harness.fake.client_secret)
    creds = {
        "source": "client_secret_env",
        "tenant_id": harness.fake.tenant_id,
        "client_id": harness.fake.client_id,
        "secret_env": "CM_AZURE_SECRET",
    }
    assert all(c.ok for c in provider_of(harness, credentials=creds).check())


def test_fake_stops_its_threads(tmp_path: Path) -> None:
    with contract_harness(tmp_path) as h:
        provider_of(h).launch(h.spec(["n-001"]), 1, "req-stop")
    leftover = [t.name for t in threading.enumerate() if t.name.startswith("azure-fake")]
    assert leftover == []


def test_fake_runs_as_a_separate_process_with_remote_control(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.azure_fake"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        secret = tmp_path / "secret"
        secret.write_text(info["client_secret"])
        with ca_bundle_env(info["ca_bundle"]):
            _control(info, "fail_next_vm_puts", {"code": "SkuNotAvailable", "attempts": 2})
            provider = AzureProvider(_remote_settings(info, secret), CLUSTER)
            spec_ = _remote_spec(info)
            result = provider.launch(spec_, 1, "req-remote")
            assert [(e.code, e.instance_type) for e in result.errors] == [
                ("SkuNotAvailable", "Standard_D2s_v3"),
                ("SkuNotAvailable", "Standard_D4s_v3"),
            ]
            assert result.instances == []
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0


def _control(info: dict[str, Any], method: str, args: dict[str, Any]) -> None:
    import ssl

    context = ssl.create_default_context(cafile=info["ca_bundle"])
    url = f"{info['url']}/_fake/{method}"  # https on 127.0.0.1
    request = urllib.request.Request(url, data=json.dumps(args).encode(), method="POST")  # noqa: S310
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:  # noqa: S310
        assert answer.status == 200


def _remote_settings(info: dict[str, Any], secret: Path) -> Any:
    from clustermgr.config import ProviderSettings

    return ProviderSettings.model_validate(
        {
            "name": "remote",
            "type": "azure",
            "region": info["region"],
            "endpoint_url": info["url"],
            "subscription_id": info["subscription_id"],
            "resource_group": info["resource_group"],
            "authority_host": info["authority_host"],
            "disable_instance_discovery": True,
            "polling_interval_s": 0.01,
            "credentials": {
                "source": "client_secret_file",
                "tenant_id": info["tenant_id"],
                "client_id": info["client_id"],
                "secret_file": str(secret),
            },
        }
    )


def _remote_spec(info: dict[str, Any]) -> Any:
    from clustermgr.providers.base import LaunchSpec

    return LaunchSpec(
        template="remote",
        instance_types=("Standard_D2s_v3", "Standard_D4s_v3"),
        image=info["image"],
        node_names=("r-001",),
        subnets=(info["subnet"],),
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("subnets", "/subscriptions/x/resourceGroups/rg-burst/providers/Microsoft.Network/"
         "virtualNetworks/vnet-burst/subnets/missing"),
        ("subnets", "not-a-subnet-id"),
        ("key_name", "no-such-key"),
        ("image", "/subscriptions/s/resourceGroups/rg-burst/providers/Microsoft.Compute/images/x"),
    ],
)  # fmt: skip
def test_spec_fields_are_validated_before_launching(
    harness: AzureHarness, field: str, value: str
) -> None:
    spec = harness.spec(["n-001"])
    changes = {field: (value,) if field == "subnets" else value}
    with pytest.raises(ProviderError) as caught:
        provider_of(harness).launch(type(spec)(**{**spec.__dict__, **changes}), 1, "req-v")
    assert caught.value.kind is ErrorKind.INVALID
    assert field in str(caught.value) and spec.template in str(caught.value)
    assert harness.fake.requests("PUT") == []


def test_ssh_key_resource_and_gallery_image_are_used(harness: AzureHarness) -> None:
    spec = harness.spec(["n-001"])
    gallery = (
        f"/subscriptions/{harness.fake.subscription_id}/resourceGroups/rg-burst/providers/"
        "Microsoft.Compute/galleries/gal/images/compute/versions/1.0.0"
    )
    changed = type(spec)(**{**spec.__dict__, "key_name": "burst-key", "image": gallery})
    result = provider_of(harness).launch(changed, 1, "req-key")
    assert result.ok, result.errors
    props = harness.fake.vm(result.instances[0].instance_id)["properties"]
    keys = props["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
    assert keys[0]["keyData"] == harness.fake.ssh_keys["burst-key"]
    assert props["storageProfile"]["imageReference"] == {"id": gallery}


def test_no_secret_in_debug_logs(harness: AzureHarness, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    provider = provider_of(harness)
    provider.launch(harness.spec(["n-001"]), 1, "req-log")
    provider.check()
    assert caplog.text  # the SDKs did log
    assert harness.fake.client_secret not in caplog.text

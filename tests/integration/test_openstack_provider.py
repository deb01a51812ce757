"""OpenStack-specific behaviour beyond the contract, through openstacksdk against FakeOpenStack:
paging, BUILD -> ACTIVE, "No valid host", quota, throttling, idempotency, auth, lookups."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import TAG_CLUSTER, TAG_NODE, TAG_REQUEST, InstanceState
from clustermgr.providers.openstack.provider import OpenStackProvider
from tests.fakes.openstack_fake import FakeOpenStack, remote_control
from tests.fakes.openstack_harness import (
    FAST,
    GOOD_CLOUD,
    OpenStackHarness,
    clouds_yaml_env,
    contract_harness,
    fast,
    settings_for,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[OpenStackHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def creates(fake: FakeOpenStack) -> int:
    return len(fake.requests("POST", "/compute/v2.1/servers"))


def test_list_follows_pages_with_marker_and_limit(harness: OpenStackHarness) -> None:
    provider = harness.os_provider()
    names = [f"n-{i:03d}" for i in range(1, 6)]
    result = provider.launch(harness.spec(names), 5, "req-page-1")
    assert result.ok, result.errors
    listed = provider.list_instances()
    assert sorted(i.node_name or "" for i in listed.values()) == names
    pages = harness.fake.requests("GET", "/compute/v2.1/servers/detail")
    assert any("marker=" in path and "limit=2" in path for _, path in pages)
    for inst in listed.values():
        assert inst.state is InstanceState.RUNNING
        assert inst.private_address and inst.private_address.startswith("10.20.")
        assert inst.instance_type == "g1.a100x8"
        assert inst.zone == "nova"


def test_servers_of_other_clusters_are_not_listed_or_terminated(
    harness: OpenStackHarness,
) -> None:
    ours = harness.os_provider()
    theirs = fast(OpenStackProvider(harness.settings(name="other"), "other-cluster"))
    assert isinstance(theirs, OpenStackProvider)
    foreign = theirs.launch(harness.spec(["n-001"]), 1, "req-other").instances[0]
    assert ours.list_instances() == {}
    ours.terminate([foreign.instance_id], "req-term")
    assert len(harness.fake.servers()) == 1
    theirs.terminate([foreign.instance_id, "no-such-server"], "req-term")
    assert harness.fake.servers() == []


def test_waits_for_build_to_become_active(harness: OpenStackHarness) -> None:
    harness.fake.set_build_polls(3)
    provider = harness.os_provider()
    result = provider.launch(harness.spec(["n-001", "n-002"]), 2, "req-build-1")
    assert result.ok, result.errors
    assert all(i.state is InstanceState.RUNNING for i in result.instances)
    server = harness.fake.servers()[0]
    assert server["_views"] >= 4
    assert server["metadata"][TAG_NODE] in ("n-001", "n-002")
    assert server["key_name"] == "burst-key"
    assert server["user_data"]  # base64 of the cloud-config


def test_still_building_at_the_deadline_is_returned_pending(harness: OpenStackHarness) -> None:
    harness.fake.set_build_polls(10_000)
    provider = harness.os_provider()
    provider.timing = dataclasses.replace(FAST, active_timeout_s=0.05)
    result = provider.launch(harness.spec(["n-001"]), 1, "req-slow-1")
    assert [i.state for i in result.instances] == [InstanceState.PENDING]
    assert result.errors == []


def test_no_valid_host_is_capacity_deletes_server_and_tries_next_flavor(
    harness: OpenStackHarness,
) -> None:
    harness.fake.fail_next_creates("capacity", attempts=1)
    provider = harness.os_provider()
    result = provider.launch(harness.spec(["n-001"]), 1, "req-nvh-1")
    assert result.ok, result.errors
    assert result.instances[0].instance_type == "g1.a100x1"
    [error] = result.errors
    assert error.kind is ErrorKind.CAPACITY
    assert error.instance_type == "g1.a100x8"
    assert "No valid host" in error.message
    assert error.reason().startswith("(Code:CAPACITY) ServerFault500")
    assert creates(harness.fake) == 2
    assert len(harness.fake.requests("DELETE", "/compute/v2.1/servers/")) == 1
    assert [s["id"] for s in harness.fake.servers()] == [result.instances[0].instance_id]


@pytest.mark.parametrize(
    ("fault", "kind", "text"),
    [
        ("broken-image", ErrorKind.OTHER, "aborted: Image"),
        ("retries", ErrorKind.OTHER, "Exhausted all hosts"),
        ("quota-recheck", ErrorKind.QUOTA, "Quota exceeded for instances"),
    ],
)
def test_a_build_fault_that_is_not_no_valid_host_tries_no_other_flavor(
    harness: OpenStackHarness, fault: str, kind: ErrorKind, text: str
) -> None:
    # Nova gives most build failures fault code 500 (the quota recheck 413): only "No valid
    # host was found" is capacity, so a broken image does not walk every flavor
    harness.fake.fail_next_creates(fault, attempts=1)
    result = harness.os_provider().launch(harness.spec(["n-001"]), 1, "req-fault")
    [error] = result.errors
    assert result.instances == [] and (error.kind, error.instance_type) == (kind, "g1.a100x8")
    assert text in error.message
    assert creates(harness.fake) == 1 and harness.fake.servers() == []


def test_external_network_policy_403_is_invalid_not_quota(harness: OpenStackHarness) -> None:
    harness.fake.fail_next_creates("policy", attempts=1)
    result = harness.os_provider().launch(harness.spec(["n-001"]), 1, "req-policy")
    [error] = result.errors
    assert error.kind is ErrorKind.INVALID and "external network" in error.message
    assert creates(harness.fake) == 1


def test_capacity_on_every_flavor_leaves_no_server(harness: OpenStackHarness) -> None:
    harness.fake.limit_capacity(0)
    provider = harness.os_provider()
    result = provider.launch(harness.spec(["n-001", "n-002"]), 2, "req-nvh-2")
    assert result.instances == [] and result.missing == 2
    assert {e.kind for e in result.errors} == {ErrorKind.CAPACITY}
    assert sum(e.count for e in result.errors) == 4  # 2 nodes x 2 flavors
    assert harness.fake.servers() == []


def test_quota_403_is_quota_and_stops_later_creates(harness: OpenStackHarness) -> None:
    harness.fake.set_quota(1)
    provider = harness.os_provider()
    result = provider.launch(harness.spec(["n-001", "n-002", "n-003"]), 3, "req-quota-1")
    assert len(result.instances) == 1
    assert {e.kind for e in result.errors} == {ErrorKind.QUOTA}
    assert sum(e.count for e in result.errors) == 2
    assert "Quota exceeded for instances" in result.errors[0].message
    assert len(harness.fake.servers()) == 1


def test_throttling_is_retried_with_backoff_then_succeeds(harness: OpenStackHarness) -> None:
    harness.fake.fail_next_creates("throttle", attempts=2)
    provider = harness.os_provider()
    result = provider.launch(harness.spec(["n-001"]), 1, "req-429-1")
    assert result.ok, result.errors
    assert creates(harness.fake) == 3  # FAST.throttle_attempts


def test_throttling_past_the_attempts_is_returned(harness: OpenStackHarness) -> None:
    harness.fake.fail_next_creates("throttle", attempts=50)
    provider = harness.os_provider()
    result = provider.launch(harness.spec(["n-001", "n-002"]), 2, "req-429-2")
    assert result.instances == []
    assert {e.kind for e in result.errors} == {ErrorKind.THROTTLED}
    assert creates(harness.fake) <= 2 * FAST.throttle_attempts


def test_same_request_reuses_by_name_and_metadata(harness: OpenStackHarness) -> None:
    provider = harness.os_provider()
    spec = harness.spec(["n-001", "n-002"])
    first = provider.launch(spec, 2, "req-idem-1")
    posts = creates(harness.fake)
    again = fast(OpenStackProvider(harness.settings(), harness.cluster)).launch(
        spec, 2, "req-idem-1"
    )
    assert sorted(i.instance_id for i in again.instances) == sorted(
        i.instance_id for i in first.instances
    )
    assert creates(harness.fake) == posts
    names = harness.fake.server_names()
    assert names == ["contract-n-001", "contract-n-002"]
    meta = harness.fake.servers()[0]["metadata"]
    assert meta[TAG_CLUSTER] == "contract" and meta[TAG_REQUEST] == "req-idem-1"


def test_a_node_held_by_another_request_is_not_doubled(harness: OpenStackHarness) -> None:
    provider = harness.os_provider()
    provider.launch(harness.spec(["n-001"]), 1, "req-a")
    result = provider.launch(harness.spec(["n-001"]), 1, "req-b")
    assert result.instances == []
    assert [e.code for e in result.errors] == ["NameInUse"]
    assert len(harness.fake.servers()) == 1


def test_a_failed_server_from_an_earlier_try_is_replaced(harness: OpenStackHarness) -> None:
    provider = harness.os_provider()
    first = provider.launch(harness.spec(["n-001"]), 1, "req-err-1")
    old = first.instances[0].instance_id
    harness.fake.set_status(old, "ERROR")
    again = provider.launch(harness.spec(["n-001"]), 1, "req-err-1")
    assert again.ok and again.instances[0].instance_id != old
    assert [s["id"] for s in harness.fake.servers()] == [again.instances[0].instance_id]


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("image", {"image": "no-such-image"}),
        ("network", {"network": "no-such-net"}),
        ("key_name", {"key_name": "no-such-key"}),
        ("instance_types", {"instance_types": ("g1.a100x8", "g9.nope")}),
    ],
)
def test_unknown_names_are_invalid_before_any_create(
    harness: OpenStackHarness, field: str, change: dict[str, object]
) -> None:
    provider = harness.os_provider()
    spec = dataclasses.replace(harness.spec(["n-001"]), **change)  # type: ignore[arg-type]
    with pytest.raises(ProviderError) as caught:
        provider.launch(spec, 1, "req-invalid")
    assert caught.value.kind is ErrorKind.INVALID
    assert "openstack-gpu" in str(caught.value) and field in str(caught.value)
    assert creates(harness.fake) == 0


def test_flavor_by_id_and_zone_are_used(harness: OpenStackHarness) -> None:
    provider = harness.os_provider()
    spec = dataclasses.replace(harness.spec(["n-001"], ["11"]), zones=("az-2",))
    result = provider.launch(spec, 1, "req-id-1")
    assert result.ok, result.errors
    assert result.instances[0].instance_type == "g1.a100x1"
    assert result.instances[0].zone == "az-2"


def test_revoked_credentials_mid_run_are_auth(harness: OpenStackHarness) -> None:
    provider = harness.os_provider()
    provider.list_instances()
    harness.fake.set_password("rotated-" + harness.fake.password)
    with pytest.raises(ProviderError) as caught:
        provider.launch(harness.spec(["n-001"]), 1, "req-auth-1")
    assert caught.value.kind is ErrorKind.AUTH
    text = str(caught.value)
    assert "clouds.yaml cloud 'fakestack'" in text and "openstack-test" in text
    assert harness.fake.password not in text


def test_unknown_cloud_is_auth_naming_it(harness: OpenStackHarness) -> None:
    provider = fast(OpenStackProvider(settings_for("no-such-cloud", "RegionOne"), "c"))
    with pytest.raises(ProviderError) as caught:
        provider.list_instances()
    assert caught.value.kind is ErrorKind.AUTH
    assert "no-such-cloud" in str(caught.value)
    checks = provider.check()
    assert [c.ok for c in checks] == [False]


def test_endpoint_url_overrides_the_clouds_yaml_auth_url(
    harness: OpenStackHarness, tmp_path: Path
) -> None:
    entry = harness.fake.cloud_entry()
    entry["auth"]["auth_url"] = "http://127.0.0.1:9/identity/v3"  # nothing listens there
    path = tmp_path / "moved.yaml"
    path.write_text(json.dumps({"clouds": {GOOD_CLOUD: entry}}))
    with clouds_yaml_env(path):
        provider = OpenStackProvider(
            settings_for(GOOD_CLOUD, "RegionOne", endpoint_url=harness.fake.auth_url), "c"
        )
        assert provider.list_instances() == {}


def test_catalog_reads_gpus_from_extra_specs(harness: OpenStackHarness) -> None:
    types = {t.name: t for t in harness.os_provider().catalog()}
    assert (types["g1.a100x8"].gpu_model, types["g1.a100x8"].gpu_count) == ("a100", 8)
    assert (types["g1.pgpu"].gpu_model, types["g1.pgpu"].gpu_count) == ("l40s", 2)
    assert types["m1.small"].gpu_count == 0 and types["m1.small"].memory_mb == 2048


def test_older_nova_flavor_ids_and_separate_extra_specs(tmp_path: Path) -> None:
    with contract_harness(tmp_path, max_microversion="2.42") as old:
        provider = old.os_provider()
        types = {t.name: t for t in provider.catalog()}
        assert (types["g1.a100x8"].gpu_model, types["g1.a100x8"].gpu_count) == ("a100", 8)
        assert old.fake.requests("GET", "/os-extra_specs")
        result = provider.launch(old.spec(["n-001"]), 1, "req-old-1")
        assert result.ok, result.errors
        assert result.instances[0].instance_type == "g1.a100x8"
        [listed] = provider.list_instances().values()
        assert listed.instance_type == "g1.a100x8"


def test_check_lines(harness: OpenStackHarness) -> None:
    checks = harness.os_provider().check()
    assert [c.name for c in checks] == ["token", "compute endpoint", "flavors"]
    assert all(c.ok for c in checks), checks
    assert "clouds.yaml cloud 'fakestack'" in checks[0].detail
    bad = harness.bad_credentials_provider().check()
    assert [(c.name, c.ok) for c in bad] == [("token", False)]
    assert "AUTH" in bad[0].detail and "fakestack-wrong" in bad[0].detail
    assert harness.fake.password not in bad[0].detail


def test_fake_in_another_process_is_driven_over_http(tmp_path: Path) -> None:
    """The shape later end-to-end tests use: the fake as a process, clouds.yaml, control API."""
    clouds = tmp_path / "clouds.yaml"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.openstack_fake", str(clouds)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert remote_control(info["url"], "limit_capacity", instances=0) == {"ok": True}
        with clouds_yaml_env(Path(info["clouds_yaml"])):
            provider = fast(OpenStackProvider(settings_for(info["cloud"], info["region"]), "c"))
            spec = dataclasses.replace(
                OpenStackHarness(FakeOpenStack(), tmp_path, clouds).spec(["n-001"]),
                image=info["image"],
                network=info["network"],
            )
            result = provider.launch(spec, 1, "req-proc-1")
        assert result.instances == []
        assert result.errors[0].kind is ErrorKind.CAPACITY
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)

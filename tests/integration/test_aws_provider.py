"""AWS provider behaviour beyond the contract, against moto behind FakeAws.

What the provider sends is read with botocore event hooks on its own client
(`provide-client-params.ec2.<Operation>`), never by patching our classes.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.aws.provider import AwsProvider
from clustermgr.providers.base import TAG_CLUSTER, TAG_NODE, TAG_REQUEST, InstanceState
from tests.fakes.aws_harness import ACCESS_KEY, SECRET_KEY, AwsHarness, contract_harness

pytestmark = pytest.mark.integration


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AwsHarness]:
    with contract_harness(tmp_path) as harness:
        yield harness


class Calls:
    """Every call the provider's EC2 client makes, with its API parameters."""

    def __init__(self, provider: AwsProvider) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        provider.ec2().meta.events.register("provide-client-params.ec2.*", self._record)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.seen.append((model.name, json.loads(json.dumps(params, default=str))))

    def of(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.seen if name == operation]


def provider(aws: AwsHarness, **overrides: Any) -> AwsProvider:
    made = aws.provider(**overrides)
    assert isinstance(made, AwsProvider)
    return made


def names(count: int) -> list[str]:
    return [f"n-{i:03d}" for i in range(1, count + 1)]


def test_fleet_has_an_override_for_every_type_and_subnet(aws: AwsHarness) -> None:
    prov = provider(aws)
    calls = Calls(prov)
    spec = aws.spec(names(2), ["p4d.24xlarge", "g5.12xlarge", "m5.large"])
    assert prov.launch(spec, 2, "req-overrides").ok
    (fleet,) = calls.of("CreateFleet")
    assert fleet["Type"] == "instant"
    overrides = fleet["LaunchTemplateConfigs"][0]["Overrides"]
    pairs = {(o["InstanceType"], o["SubnetId"]) for o in overrides}
    assert pairs == {(t, s) for t in spec.instance_types for s in spec.subnets}
    assert [o["Priority"] for o in overrides] == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert fleet["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 2,
        "DefaultTargetCapacityType": "on-demand",
    }
    tags = {t["Key"]: t["Value"] for t in fleet["TagSpecifications"][0]["Tags"]}
    assert tags[TAG_CLUSTER] == aws.cluster and tags[TAG_REQUEST] == "req-overrides"
    assert len(fleet["ClientToken"]) <= 64


def test_fleet_uses_zones_when_no_subnets(aws: AwsHarness) -> None:
    prov = provider(aws)
    calls = Calls(prov)
    spec = replace(aws.spec(names(1)), subnets=(), zones=("us-east-1a", "us-east-1b"))
    assert prov.launch(spec, 1, "req-zones").ok
    overrides = calls.of("CreateFleet")[0]["LaunchTemplateConfigs"][0]["Overrides"]
    assert {(o["InstanceType"], o["AvailabilityZone"]) for o in overrides} == {
        (t, z) for t in spec.instance_types for z in spec.zones
    }


def test_launch_goes_in_batches_of_at_most_launch_batch_size(aws: AwsHarness) -> None:
    prov = provider(aws, launch_batch_size=2)
    calls = Calls(prov)
    result = prov.launch(aws.spec(names(5)), 5, "req-batches")
    assert result.ok, result.errors
    fleets = calls.of("CreateFleet")
    assert [f["TargetCapacitySpecification"]["TotalTargetCapacity"] for f in fleets] == [2, 2, 1]
    assert len({f["ClientToken"] for f in fleets}) == 3
    assert sorted(i.node_name or "" for i in result.instances) == names(5)


def test_binding_tags_each_instance_once_and_retry_keeps_names(aws: AwsHarness) -> None:
    prov = provider(aws)
    calls = Calls(prov)
    spec = aws.spec(names(3))
    first = prov.launch(spec, 3, "req-bind")
    tagging = calls.of("CreateTags")
    assert len(tagging) == 3 and all(len(c["Resources"]) == 1 for c in tagging)
    bound = {i.instance_id: i.node_name for i in first.instances}
    assert sorted(bound.values()) == names(3)
    described = aws.client().describe_instances(InstanceIds=list(bound))["Reservations"]
    for reservation in described:
        for inst in reservation["Instances"]:
            tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
            assert tags[TAG_NODE] == bound[inst["InstanceId"]]
    again = prov.launch(spec, 3, "req-bind")
    assert {i.instance_id: i.node_name for i in again.instances} == bound
    assert len(calls.of("CreateTags")) == 3  # nothing re-tagged
    assert len(calls.of("CreateLaunchTemplate")) == 1
    assert calls.of("DescribeInstanceTypes") == calls.of("DescribeInstanceTypes")[:1]


def test_spot_launch_sends_market_options_and_max_price(aws: AwsHarness) -> None:
    prov = provider(aws)
    calls = Calls(prov)
    spec = replace(aws.spec(names(2)), market="spot", max_spot_price=3.5)
    result = prov.launch(spec, 2, "req-spot")
    assert result.ok, result.errors
    (fleet,) = calls.of("CreateFleet")
    assert fleet["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "spot"
    assert fleet["SpotOptions"]["AllocationStrategy"] == "capacity-optimized-prioritized"
    assert {o["MaxPrice"] for o in fleet["LaunchTemplateConfigs"][0]["Overrides"]} == {"3.5"}
    assert {i.lifecycle for i in result.instances} == {"spot"}


def test_launch_template_holds_metadata_tags_and_versions_on_change(aws: AwsHarness) -> None:
    spec = aws.spec(names(1))
    first = provider(aws)
    calls = Calls(first)
    first.launch(spec, 1, "req-lt-1")
    first.launch(spec, 1, "req-lt-2")
    assert len(calls.of("CreateLaunchTemplate")) == 1
    assert (
        calls.of("DescribeLaunchTemplateVersions") == calls.of("DescribeLaunchTemplateVersions")[:1]
    )
    data = calls.of("CreateLaunchTemplate")[0]["LaunchTemplateData"]
    assert data["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
    assert base64.b64decode(data["UserData"]).decode() == spec.user_data
    second = provider(aws)  # a fresh process: nothing cached
    calls = Calls(second)
    second.launch(spec, 1, "req-lt-3")
    assert calls.of("CreateLaunchTemplateVersion") == []
    second.launch(replace(spec, user_data="#cloud-config\nchanged: true\n"), 1, "req-lt-4")
    (made,) = calls.of("CreateLaunchTemplateVersion")
    assert (
        calls.of("CreateFleet")[-1]["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"][
            "Version"
        ]
        == "2"
    )
    assert "changed" in base64.b64decode(made["LaunchTemplateData"]["UserData"]).decode()


def test_list_sends_max_results_and_tag_filters(aws: AwsHarness) -> None:
    prov = provider(aws)
    prov.launch(aws.spec(names(2)), 2, "req-list")
    other = AwsProvider(aws.settings(name="other"), "another-cluster")
    other.launch(aws.spec(names(1)), 1, "req-other")
    calls = Calls(prov)
    listed = prov.list_instances()
    assert len(listed) == 2
    (params,) = calls.of("DescribeInstances")
    assert params["MaxResults"] == 1000
    filters = {f["Name"]: f["Values"] for f in params["Filters"]}
    assert filters[f"tag:{TAG_CLUSTER}"] == [aws.cluster]
    assert "terminated" not in filters["instance-state-name"]
    assert "running" in filters["instance-state-name"]
    inst = next(iter(listed.values()))
    assert inst.private_address and inst.zone and inst.launch_time is not None
    assert inst.state in (InstanceState.PENDING, InstanceState.RUNNING)


def test_terminate_goes_in_batches_and_only_touches_ours(aws: AwsHarness) -> None:
    prov = provider(aws, terminate_batch_size=2)
    mine = [i.instance_id for i in prov.launch(aws.spec(names(5)), 5, "req-term").instances]
    other = AwsProvider(aws.settings(name="other"), "another-cluster")
    theirs = other.launch(aws.spec(names(1)), 1, "req-other").instances[0].instance_id
    calls = Calls(prov)
    prov.terminate([*mine, theirs, "i-0123456789abcdef0"], "req-term-2")
    batches = [c["InstanceIds"] for c in calls.of("TerminateInstances")]
    assert [len(b) for b in batches] == [2, 2, 1]
    assert sorted(i for b in batches for i in b) == sorted(mine)
    assert prov.list_instances() == {}
    assert list(other.list_instances()) == [theirs]
    prov.terminate(mine, "req-term-3")  # all gone: no error, no call
    assert len(calls.of("TerminateInstances")) == 3


def test_run_instances_fallback_when_fleet_api_is_missing(aws: AwsHarness) -> None:
    aws.fake.no_fleet_api()
    prov = provider(aws)
    calls = Calls(prov)
    spec = aws.spec(names(3))
    first = prov.launch(spec, 3, "req-run")
    assert first.ok, first.errors
    assert sorted(i.node_name or "" for i in first.instances) == names(3)
    (run,) = calls.of("RunInstances")
    assert run["MinCount"] == 1 and run["MaxCount"] == 3
    assert run["InstanceType"] == spec.instance_types[0] and run["SubnetId"] == spec.subnets[0]
    again = prov.launch(spec, 3, "req-run")
    assert sorted(i.instance_id for i in again.instances) == sorted(
        i.instance_id for i in first.instances
    )
    assert len(calls.of("CreateFleet")) == 1  # remembered: not offered here
    assert len(prov.list_instances()) == 3


def test_run_instances_fallback_moves_on_after_capacity(aws: AwsHarness) -> None:
    aws.fake.no_fleet_api()
    aws.fake.limit_capacity(2)
    prov = provider(aws)
    calls = Calls(prov)
    result = prov.launch(aws.spec(names(3)), 3, "req-run-partial")
    assert len(result.instances) == 2 and result.missing == 1
    assert result.errors and result.errors[0].kind is ErrorKind.CAPACITY
    assert sum(e.count for e in result.errors) == 1
    runs = calls.of("RunInstances")
    assert len(runs) == 4  # 2 types x 2 subnets, each asked for what was still missing
    assert len({r["ClientToken"] for r in runs}) == 4


def test_unknown_image_is_invalid_before_launch(aws: AwsHarness) -> None:
    prov = provider(aws)
    calls = Calls(prov)
    spec = replace(aws.spec(names(1)), image="ami-00000000deadbeef0")
    with pytest.raises(ProviderError) as caught:
        prov.launch(spec, 1, "req-bad-image")
    assert caught.value.kind is ErrorKind.INVALID
    assert "image" in str(caught.value) and spec.template in str(caught.value)
    assert calls.of("CreateFleet") == []


def test_throttling_is_retried_by_botocore(aws: AwsHarness) -> None:
    aws.fake.fail_next_launches("RequestLimitExceeded", attempts=2)
    result = provider(aws).launch(aws.spec(names(1)), 1, "req-throttled-once")
    assert result.ok, result.errors


def test_slow_answers_still_work(aws: AwsHarness) -> None:
    aws.fake.slow(0.3, attempts=1, actions=["CreateFleet"])
    started = time.monotonic()
    assert provider(aws).launch(aws.spec(names(1)), 1, "req-slow").ok
    assert time.monotonic() - started >= 0.3


def test_rejected_environment_key_is_auth_naming_the_source(
    aws: AwsHarness, caplog: pytest.LogCaptureFixture
) -> None:
    spec = aws.spec(names(1))
    caplog.set_level(logging.DEBUG)
    aws.fake.reject_access_key(ACCESS_KEY)
    prov = provider(aws)
    with pytest.raises(ProviderError) as caught:
        prov.launch(spec, 1, "req-auth")
    assert caught.value.kind is ErrorKind.AUTH
    assert "environment" in str(caught.value) and "\n" not in str(caught.value)
    checks = prov.check()
    assert [c.ok for c in checks] == [False]
    assert SECRET_KEY not in str(caught.value) + caplog.text + checks[0].detail


def test_missing_profile_fails_check_without_raising(aws: AwsHarness) -> None:
    creds = {"source": "profile", "profile": "no-such-profile"}
    prov = provider(aws, credentials=creds)
    (check,) = prov.check()
    assert not check.ok and "profile no-such-profile" in check.detail
    with pytest.raises(ProviderError) as caught:
        prov.list_instances()
    assert caught.value.kind is ErrorKind.AUTH


def test_catalog_reads_gpu_info(aws: AwsHarness) -> None:
    types = {t.name: t for t in provider(aws).catalog()}
    p4d = types["p4d.24xlarge"]
    assert (p4d.gpu_model, p4d.gpu_count, p4d.gpu_memory_mb) == ("a100", 8, 40960)
    assert p4d.vcpus == 96 and p4d.memory_mb == 1179648
    assert types["m5.large"].gpu_count == 0


def test_fake_is_controlled_over_http(aws: AwsHarness) -> None:
    """What an end-to-end test does when the provider runs in another process."""
    body = json.dumps({"instances": 0}).encode()
    url = f"{aws.fake.url}/_fake/limit_capacity"
    request = urllib.request.Request(url, data=body)  # noqa: S310 (loopback)
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
        assert json.loads(answer.read()) == {"ok": True}
    result = provider(aws).launch(aws.spec(names(1)), 1, "req-http")
    assert result.instances == [] and result.errors[0].kind is ErrorKind.CAPACITY


def test_an_all_or_nothing_launch_asks_each_type_and_subnet_for_all_nodes_or_none(
    aws: AwsHarness,
) -> None:
    """One CreateFleet per type x subnet, in order, each with MinTargetCapacity = the job's
    nodes on a single type in a single zone; EC2 (the fake, as the API reference says)
    starts none when it cannot start them all, and the next attempt gets the whole job."""
    aws.fake.limit_capacity(3, "p4d.24xlarge")
    prov = provider(aws)
    calls = Calls(prov)
    result = prov.launch(replace(aws.spec(names(4)), all_or_nothing=True), 4, "req-aon")
    assert result.ok, result.errors
    fleets = calls.of("CreateFleet")
    assert len(fleets) == 3  # p4d in each subnet: none; g5 in the first subnet: all four
    for fleet in fleets:
        assert len(fleet["LaunchTemplateConfigs"][0]["Overrides"]) == 1
        assert fleet["OnDemandOptions"]["MinTargetCapacity"] == 4
        assert fleet["OnDemandOptions"]["SingleInstanceType"] is True
        assert fleet["OnDemandOptions"]["SingleAvailabilityZone"] is True
        assert fleet["TargetCapacitySpecification"]["TotalTargetCapacity"] == 4
    tried = [f["LaunchTemplateConfigs"][0]["Overrides"][0] for f in fleets]
    subnets = list(aws.subnets())
    assert [(o["InstanceType"], o["SubnetId"]) for o in tried] == [
        ("p4d.24xlarge", subnets[0]),
        ("p4d.24xlarge", subnets[1]),
        ("g5.12xlarge", subnets[0]),
    ]
    assert {i.zone for i in result.instances} == {result.instances[0].zone}
    again = prov.launch(replace(aws.spec(names(4)), all_or_nothing=True), 4, "req-aon")
    assert sorted(i.instance_id for i in again.instances) == sorted(
        i.instance_id for i in result.instances
    )  # a retried request id gets EC2's first answers, no second set
    assert len(prov.list_instances()) == 4


def test_an_all_or_nothing_launch_without_the_fleet_api_asks_min_count_for_all(
    aws: AwsHarness,
) -> None:
    aws.fake.no_fleet_api()
    aws.fake.limit_capacity(3, "p4d.24xlarge")
    prov = provider(aws)
    calls = Calls(prov)
    result = prov.launch(replace(aws.spec(names(4)), all_or_nothing=True), 4, "req-aon-run")
    assert result.ok, result.errors
    assert {i.instance_type for i in result.instances} == {"g5.12xlarge"}
    runs = calls.of("RunInstances")
    assert [(r["InstanceType"], r["MinCount"], r["MaxCount"]) for r in runs] == [
        ("p4d.24xlarge", 4, 4),
        ("p4d.24xlarge", 4, 4),
        ("g5.12xlarge", 4, 4),
    ]

"""`efa = true` on an AWS template, through boto3 against moto behind FakeAws: the launch
template's primary interface is an EFA one, the fleet launches into the placement group,
and a type without EFA (DescribeInstanceTypes `NetworkInfo.EfaSupported`) is refused
before anything is launched."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.aws.provider import AwsProvider
from tests.fakes.aws_harness import AwsHarness, contract_harness
from tests.integration.test_aws_provider import Calls

pytestmark = pytest.mark.integration


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AwsHarness]:
    with contract_harness(tmp_path) as harness:  # moto keeps no placement groups: named only
        yield harness


def efa_provider(aws: AwsHarness) -> AwsProvider:
    made = aws.provider()
    assert isinstance(made, AwsProvider)
    return made


def test_efa_launch_has_an_efa_interface_in_the_placement_group(aws: AwsHarness) -> None:
    prov = efa_provider(aws)
    calls = Calls(prov)
    spec = replace(
        aws.spec(["efa-1", "efa-2"], ["c5n.18xlarge", "p4d.24xlarge"]),
        security_groups=("sg-0123456789abcdef0",),
        placement_group="hpc-efa",
        fabric="efa",
    )
    result = prov.launch(spec, 2, "req-efa")
    assert result.ok, result.errors
    (made,) = calls.of("CreateLaunchTemplate")
    data = made["LaunchTemplateData"]
    assert data["NetworkInterfaces"] == [
        {
            "DeviceIndex": 0,
            "InterfaceType": "efa",
            "DeleteOnTermination": True,
            "Groups": ["sg-0123456789abcdef0"],
        }
    ]
    assert "SecurityGroupIds" not in data  # EC2 refuses groups both places
    assert data["Placement"] == {"GroupName": "hpc-efa"}
    overrides = calls.of("CreateFleet")[0]["LaunchTemplateConfigs"][0]["Overrides"]
    assert {o["SubnetId"] for o in overrides} == set(spec.subnets)
    # moto launches from the template but keeps neither its placement nor its interfaces
    # on the instances: what EC2 was asked for is the record here
    assert sorted(i.node_name or "" for i in result.instances) == ["efa-1", "efa-2"]
    assert {i.instance_type for i in result.instances} <= set(spec.instance_types)


def test_a_type_without_efa_is_refused_before_launch(aws: AwsHarness) -> None:
    prov = efa_provider(aws)
    calls = Calls(prov)
    spec = replace(
        aws.spec(["efa-1"], ["c5n.18xlarge", "m5.large"]), placement_group="hpc-efa", fabric="efa"
    )
    with pytest.raises(ProviderError) as caught:
        prov.launch(spec, 1, "req-no-efa")
    assert caught.value.kind is ErrorKind.INVALID
    assert "m5.large" in str(caught.value) and "EFA" in str(caught.value)
    assert calls.of("CreateFleet") == [] and calls.of("RunInstances") == []
    plain = replace(spec, fabric=None, placement_group=None)  # the same types without EFA
    assert prov.launch(plain, 1, "req-plain").ok
    assert "NetworkInterfaces" not in calls.of("CreateLaunchTemplate")[0]["LaunchTemplateData"]


def test_run_instances_fallback_puts_the_subnet_in_the_efa_interface(aws: AwsHarness) -> None:
    aws.fake.no_fleet_api()
    prov = efa_provider(aws)
    calls = Calls(prov)
    spec = replace(aws.spec(["efa-1"], ["c5n.18xlarge"]), placement_group="hpc-efa", fabric="efa")
    assert prov.launch(spec, 1, "req-efa-run").ok
    (request,) = calls.of("RunInstances")
    assert "SubnetId" not in request
    (interface,) = request["NetworkInterfaces"]
    assert interface == {
        "DeviceIndex": 0,
        "InterfaceType": "efa",
        "DeleteOnTermination": True,
        "SubnetId": spec.subnets[0],
    }

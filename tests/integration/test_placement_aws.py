"""Per-launch cluster placement groups on AWS, through boto3 against the moto-based fake
(tests/fakes/aws_placement.py): made before the launch, the fleet's instances in it, none
for one instance, found again by a retried launch, deleted once it holds no instance."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.providers.aws.provider import AwsProvider
from clustermgr.providers.launch_groups import PlacementGroups, group_name
from tests.fakes.aws_harness import CLUSTER, AwsHarness, contract_harness

pytestmark = pytest.mark.integration


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AwsHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def provider(aws: AwsHarness) -> AwsProvider:
    made = aws.provider()
    assert isinstance(made, AwsProvider) and isinstance(made, PlacementGroups)
    return made


def test_a_multi_node_launch_goes_into_a_cluster_group_of_its_own(aws: AwsHarness) -> None:
    aws_provider = provider(aws)
    spec = replace(aws.spec(["pg-1", "pg-2", "pg-3"]), launch_group="affinity")
    result = aws_provider.launch(spec, 3, "r-00000000000000a1")
    assert result.ok, result.errors
    name = group_name(CLUSTER, "aws-gpu", "r-00000000000000a1")
    assert aws.fake.placement_groups() == [name]
    assert aws.fake.placement_members(name) == {i.instance_id for i in result.instances}
    (listed,) = aws_provider.placement_groups()
    assert (listed.name, listed.request_id, listed.template) == (
        name,
        "r-00000000000000a1",
        "aws-gpu",
    )
    described = aws.client().describe_placement_groups()["PlacementGroups"]
    assert described[0]["Strategy"] == "cluster"

    # a retry of the same launch finds its group (and EC2 its instances)
    again = aws_provider.launch(spec, 3, "r-00000000000000a1")
    assert {i.instance_id for i in again.instances} == {i.instance_id for i in result.instances}
    assert aws.fake.placement_groups() == [name]

    assert aws_provider.delete_placement_group(listed) is False  # instances still in it
    aws_provider.terminate([i.instance_id for i in result.instances], "stop")
    assert aws_provider.delete_placement_group(listed) is True
    assert aws.fake.placement_groups() == [] and aws_provider.placement_groups() == []
    assert aws_provider.delete_placement_group(listed) is True  # gone is gone


def test_one_instance_or_a_template_placement_makes_no_group(aws: AwsHarness) -> None:
    aws_provider = provider(aws)
    single = replace(aws.spec(["pg-1"]), launch_group="affinity")
    assert aws_provider.launch(single, 1, "r-00000000000000b1").ok
    assert aws_provider.launch(aws.spec(["pg-2", "pg-3"]), 2, "r-00000000000000b2").ok
    assert aws.fake.placement_groups() == []


def test_the_run_instances_fallback_launches_into_the_group(aws: AwsHarness) -> None:
    aws.fake.no_fleet_api()
    aws_provider = provider(aws)
    spec = replace(aws.spec(["pg-1", "pg-2"]), launch_group="affinity")
    result = aws_provider.launch(spec, 2, "r-00000000000000c1")
    assert result.ok, result.errors
    name = group_name(CLUSTER, "aws-gpu", "r-00000000000000c1")
    assert aws.fake.placement_members(name) == {i.instance_id for i in result.instances}

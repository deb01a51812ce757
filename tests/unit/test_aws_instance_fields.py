"""The AWS provider's session parses only the instance fields the provider reads
(client.read_fewer_instance_fields: model extras merged into botocore's EC2 model): an
EC2 DescribeInstances answer still reads as the same CloudInstance, the fields nobody reads
are skipped, and the extras sit under the EC2 API version botocore loads (a botocore that
moved to another version would silently parse everything again)."""

from __future__ import annotations

from datetime import UTC, datetime

import botocore.session
from botocore.parsers import create_parser

from clustermgr.providers.aws.client import MODELS, AwsClients
from clustermgr.providers.aws.shapes import run_launched, to_instance
from clustermgr.providers.base import InstanceState
from tests.unit.test_verdicts import SETTINGS

# One item of a DescribeInstances answer as EC2 gives it (abridged from the example in
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html)
ANSWER = b"""<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
  <reservationSet><item>
    <reservationId>r-1234567890abcdef0</reservationId>
    <ownerId>123456789012</ownerId>
    <instancesSet><item>
      <instanceId>i-1234567890abcdef0</instanceId>
      <imageId>ami-bff32ccc</imageId>
      <instanceState><code>16</code><name>running</name></instanceState>
      <privateDnsName>ip-192-168-1-88.eu-west-1.compute.internal</privateDnsName>
      <instanceType>p4d.24xlarge</instanceType>
      <launchTime>2026-11-26T05:40:00.000Z</launchTime>
      <placement><availabilityZone>us-east-1a</availabilityZone><tenancy>default</tenancy></placement>
      <subnetId>subnet-56f5f633</subnetId>
      <privateIpAddress>192.168.1.88</privateIpAddress>
      <instanceLifecycle>spot</instanceLifecycle>
      <groupSet><item><groupId>sg-e4076980</groupId><groupName>SecurityGroup1</groupName></item></groupSet>
      <blockDeviceMapping><item><deviceName>/dev/xvda</deviceName>
        <ebs><volumeId>vol-1234567890abcdef0</volumeId><status>attached</status></ebs></item>
      </blockDeviceMapping>
      <networkInterfaceSet><item><networkInterfaceId>eni-0598c7d356eba48d7</networkInterfaceId>
        <privateIpAddress>192.168.1.88</privateIpAddress></item></networkInterfaceSet>
      <tagSet>
        <item><key>clustermgr-node</key><value>gpu-0001</value></item>
        <item><key>clustermgr-request</key><value>r-7</value></item>
      </tagSet>
    </item></instancesSet>
  </item></reservationSet>
</DescribeInstancesResponse>"""


def parsed(operation: str) -> dict[str, object]:
    client = AwsClients(SETTINGS.providers[0]).session().client("ec2", region_name="us-east-1")
    shape = client.meta.service_model.operation_model(operation).output_shape
    answer = {"body": ANSWER, "headers": {}, "status_code": 200}
    return dict(create_parser("ec2").parse(answer, shape))


def test_an_instance_reads_the_same_with_only_the_fields_the_provider_reads() -> None:
    [reservation] = parsed("DescribeInstances")["Reservations"]  # type: ignore[misc]
    [item] = reservation["Instances"]
    assert set(item) == {
        "InstanceId",
        "InstanceType",
        "InstanceLifecycle",
        "LaunchTime",
        "Placement",
        "PrivateIpAddress",
        "State",
        "SubnetId",
        "Tags",
    }  # no SecurityGroups, BlockDeviceMappings, NetworkInterfaces, ImageId...
    found = to_instance(item)
    assert (found.instance_id, found.node_name, found.request_id) == (
        "i-1234567890abcdef0",
        "gpu-0001",
        "r-7",
    )
    assert found.state is InstanceState.RUNNING
    assert (found.private_address, found.instance_type, found.zone, found.lifecycle) == (
        "192.168.1.88",
        "p4d.24xlarge",
        "us-east-1a",
        "spot",
    )
    assert found.launch_time == datetime(2026, 11, 26, 5, 40, tzinfo=UTC)
    [launched] = run_launched({"Instances": [item]})
    assert launched.subnet == "subnet-56f5f633"


def test_the_extras_are_for_the_ec2_version_botocore_loads() -> None:
    latest = botocore.session.Session().get_component("data_loader")
    version = latest.determine_latest_version("ec2", "service-2")
    assert (MODELS / "ec2" / version / "service-2.sdk-extras.json").is_file()
    assert [p.name for p in (MODELS / "ec2").iterdir()] == [version]

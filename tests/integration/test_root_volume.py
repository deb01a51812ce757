"""A root volume size (`volume_size_gb` of a director or template) reaches each cloud through
its real SDK, as that cloud sizes a boot disk: AWS an EBS mapping for the image's root device
in the launch template, Azure `osDisk.diskSizeGB`, OpenStack a boot-from-volume
`block_device_mapping_v2`. The local and on-prem providers cannot size one: the config says
so in one line, and the provider refuses a spec that carries one."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import boto3
import pytest

from clustermgr.config import ProviderSettings, Settings
from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import LaunchSpec
from clustermgr.providers.registry import make_provider
from tests.fakes import aws_harness, azure_harness, openstack_harness
from tests.fakes.aws_harness import AwsHarness
from tests.fakes.azure_harness import AzureHarness
from tests.fakes.openstack_harness import OpenStackHarness

pytestmark = pytest.mark.integration


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AwsHarness]:
    with aws_harness.contract_harness(tmp_path) as harness:
        yield harness


def test_aws_sizes_the_images_root_device_in_the_launch_template(aws: AwsHarness) -> None:
    provider = aws.provider()
    spec = replace(aws.spec(["d-1"]), template="director-aws", root_volume_gb=200)
    result = provider.launch(spec, 1, "req-vol-1")
    assert result.ok, result.errors
    ec2 = aws.client()
    root = ec2.describe_images(ImageIds=[spec.image])["Images"][0]["RootDeviceName"]
    (version,) = ec2.describe_launch_template_versions(
        LaunchTemplateName="clustermgr-contract-director-aws", Versions=["$Latest"]
    )["LaunchTemplateVersions"]
    assert version["LaunchTemplateData"]["BlockDeviceMappings"] == [
        {"DeviceName": root, "Ebs": {"DeleteOnTermination": True, "VolumeSize": 200}}
    ]


def test_aws_run_instances_fallback_boots_a_root_volume_of_that_size(aws: AwsHarness) -> None:
    aws.fake.no_fleet_api()
    provider = aws.provider()
    spec = replace(aws.spec(["d-1"]), template="director-aws", root_volume_gb=150)
    result = provider.launch(spec, 1, "req-vol-2")
    assert result.ok, result.errors
    iid = result.instances[0].instance_id
    ec2 = boto3.client("ec2", region_name=aws.fake.region, endpoint_url=aws.fake.url)
    volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [iid]}])
    assert 150 in [v["Size"] for v in volumes["Volumes"]]


def test_aws_refuses_a_size_below_the_images_snapshot_before_launching(aws: AwsHarness) -> None:
    provider = aws.provider()
    spec = replace(aws.spec(["d-1"]), root_volume_gb=1)  # moto's AMI has a 15 GB snapshot
    with pytest.raises(ProviderError) as caught:
        provider.launch(spec, 1, "req-vol-3")
    assert caught.value.kind is ErrorKind.INVALID
    assert "volume_size_gb" in str(caught.value) and "15 GB" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert provider.list_instances() == {}


def test_azure_sets_the_os_disk_size(tmp_path: Path) -> None:
    with azure_harness.contract_harness(tmp_path) as azure:
        assert isinstance(azure, AzureHarness)
        provider = azure.provider()
        spec = replace(azure.spec(["d-1"]), root_volume_gb=256)
        result = provider.launch(spec, 1, "req-vol-az")
        assert result.ok, result.errors
        (name,) = azure.fake.vm_names()
        os_disk = azure.fake.vm(name)["properties"]["storageProfile"]["osDisk"]
        assert os_disk["diskSizeGB"] == 256
        assert os_disk["createOption"] == "FromImage"


def test_openstack_boots_from_a_new_volume_of_that_size(tmp_path: Path) -> None:
    with openstack_harness.contract_harness(tmp_path) as stack:
        assert isinstance(stack, OpenStackHarness)
        provider = stack.provider()
        spec = replace(stack.spec(["d-1"]), root_volume_gb=80)
        result = provider.launch(spec, 1, "req-vol-os")
        assert result.ok, result.errors
        (server,) = stack.fake.servers()
        assert server["image"] == ""  # no imageRef: the volume is the boot disk
        (bdm,) = server["block_device_mapping_v2"]
        assert bdm == {
            "boot_index": 0,
            "uuid": stack.fake.images["ubuntu-24.04"],
            "source_type": "image",
            "destination_type": "volume",
            "volume_size": 80,
            "delete_on_termination": True,
        }
        plain = provider.launch(stack.spec(["n-1"]), 1, "req-plain-os")  # no size: imageRef
        assert plain.ok, plain.errors
        booted = [s for s in stack.fake.servers() if s["block_device_mapping_v2"] == []]
        assert len(booted) == 1 and booted[0]["image"] == stack.fake.images["ubuntu-24.04"]


def test_local_provider_refuses_a_root_volume(tmp_path: Path) -> None:
    settings = {"name": "p", "type": "local", "region": "r1", "state_dir": str(tmp_path)}
    provider = make_provider(ProviderSettings.model_validate(settings), "c")
    spec = LaunchSpec("t", ("local.cpu",), "local", ("n-001",), root_volume_gb=50)
    with pytest.raises(ProviderError) as caught:
        provider.launch(spec, 1, "req-vol-local")  # refused before any namespace is made
    assert caught.value.kind is ErrorKind.INVALID
    assert "volume_size_gb" in str(caught.value)


def _config(provider_type: str, where: str) -> dict[str, object]:
    provider: dict[str, object] = {"name": "p", "type": provider_type, "region": "r1"}
    if provider_type == "local":
        provider["subnet"] = "10.77.0.0/24"
    template: dict[str, object] = {
        "name": "t",
        "provider": "p",
        "instance_types": ["local.cpu"],
        "image": "img",
        "partition": "cloud",
        "nodes": "n-[001-002]",
        "cpus": 2,
        "memory_mb": 1024,
    }
    director: dict[str, object] = {"provider": "p", "instance_type": "x", "image": "img"}
    (template if where == "template" else director)["volume_size_gb"] = 100
    return {
        "cluster": {"name": "c"},
        "providers": [provider],
        "templates": [template],
        "directors": [director],
    }


@pytest.mark.parametrize("where", ["template", "director"])
def test_a_size_on_a_provider_that_cannot_apply_it_is_one_config_line(where: str) -> None:
    with pytest.raises(ValueError) as caught:
        Settings.model_validate(_config("local", where))
    message = str(caught.value)
    assert "volume_size_gb is set, but local provider 'p' cannot size a root volume" in message


def test_a_size_on_a_cloud_provider_is_accepted() -> None:
    settings = Settings.model_validate(_config("aws", "director"))
    assert settings.directors[0].volume_size_gb == 100

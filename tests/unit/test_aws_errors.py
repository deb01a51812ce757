"""AWS error mapping (one code table, never message text) and the pure request shapes."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ProfileNotFound,
)

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.aws.errors import ERROR_KINDS, classify, kind_of
from clustermgr.providers.aws.shapes import (
    Attempt,
    client_token,
    content_digest,
    fleet_errors,
    fleet_launched,
    fleet_overrides,
    launch_template_data,
    launch_template_name,
    run_request,
    to_instance,
    to_instance_type,
)
from clustermgr.providers.base import TAG_NODE, InstanceState, LaunchSpec


def client_error(code: str, message: str = "whatever", status: int = 400) -> ClientError:
    response = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "CreateFleet")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InsufficientInstanceCapacity", ErrorKind.CAPACITY),
        ("InsufficientCapacity", ErrorKind.CAPACITY),
        ("Unsupported", ErrorKind.CAPACITY),
        ("Server.InsufficientInstanceCapacity", ErrorKind.CAPACITY),
        ("InstanceLimitExceeded", ErrorKind.QUOTA),
        ("VcpuLimitExceeded", ErrorKind.QUOTA),
        ("MaxSpotInstanceCountExceeded", ErrorKind.QUOTA),
        ("RequestLimitExceeded", ErrorKind.THROTTLED),
        ("Throttling", ErrorKind.THROTTLED),
        ("AuthFailure", ErrorKind.AUTH),
        ("UnauthorizedOperation", ErrorKind.AUTH),
        ("InvalidClientTokenId", ErrorKind.AUTH),
        ("SignatureDoesNotMatch", ErrorKind.AUTH),
        ("InvalidParameterValue", ErrorKind.INVALID),
        ("InvalidAMIID.NotFound", ErrorKind.INVALID),
        ("InvalidAMIID.Malformed", ErrorKind.INVALID),
        ("InvalidInstanceType", ErrorKind.INVALID),
        ("InternalError", ErrorKind.TRANSIENT),
        ("ServiceUnavailable", ErrorKind.TRANSIENT),
        ("SomethingNew", ErrorKind.OTHER),
        ("UnsupportedOperation", ErrorKind.INVALID),  # not "Unsupported": no prefix matching
        ("InvalidInstanceID.NotFound", ErrorKind.TRANSIENT),  # eventual consistency
    ],
)
def test_codes_map_to_kinds(code: str, kind: ErrorKind) -> None:
    assert kind_of(code) is kind
    assert classify(client_error(code)).kind is kind


def test_message_text_is_never_matched() -> None:
    tricky = client_error("SomethingNew", "InsufficientInstanceCapacity AuthFailure throttled")
    assert classify(tricky).kind is ErrorKind.OTHER
    plain = client_error("VcpuLimitExceeded", "capacity capacity capacity")
    assert classify(plain).kind is ErrorKind.QUOTA


def test_classify_keeps_code_status_and_first_line() -> None:
    failure = classify(client_error("RequestLimitExceeded", "slow down\nmore", status=503))
    assert (failure.code, failure.status, failure.message) == (
        "RequestLimitExceeded",
        503,
        "slow down",
    )


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (NoCredentialsError(), ErrorKind.AUTH),
        (ProfileNotFound(profile="x"), ErrorKind.AUTH),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), ErrorKind.TRANSIENT),
    ],
)
def test_botocore_exceptions_by_class(exc: Exception, kind: ErrorKind) -> None:
    assert classify(exc).kind is kind


def test_table_keys_are_codes_not_sentences() -> None:
    assert all(" " not in code for code in ERROR_KINDS)


# ---------------------------------------------------------------------------- shapes

SPEC = LaunchSpec(
    template="gpu",
    instance_types=("p4d.24xlarge", "g5.12xlarge"),
    image="ami-12345678",
    node_names=("n-1", "n-2"),
    subnets=("subnet-a", "subnet-b", "subnet-c"),
    security_groups=("sg-1",),
    user_data="#!/bin/sh\necho hi\n",
    instance_profile="arn:aws:iam::1:instance-profile/burst",
)


def test_client_token_is_deterministic_and_short() -> None:
    assert client_token("c", "req-1", "b0") == client_token("c", "req-1", "b0")
    assert client_token("c", "req-1", "b0") != client_token("c", "req-1", "b1")
    assert client_token("c", "req-1", "b0") != client_token("d", "req-1", "b0")
    long = client_token("cluster" * 5, "r" * 100, "b12r3")
    assert len(long) <= 64 and long.endswith(".b12r3")
    assert client_token("c", "ünïcode req", "b0").isascii()


def test_launch_template_name_is_valid() -> None:
    assert launch_template_name("prod", "gpu.a100") == "clustermgr-prod-gpu.a100"
    assert len(launch_template_name("c" * 100, "t" * 100)) <= 128


def test_launch_template_data() -> None:
    data = launch_template_data(SPEC)
    assert data["MetadataOptions"]["InstanceMetadataTags"] == "enabled"
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert base64.b64decode(data["UserData"]).decode() == SPEC.user_data
    assert data["SecurityGroupIds"] == ["sg-1"]
    assert data["IamInstanceProfile"] == {"Arn": SPEC.instance_profile}
    assert content_digest(data) == content_digest(dict(reversed(list(data.items()))))
    other = launch_template_data(LaunchSpec("gpu", ("m5.large",), "ami-12345678", user_data="x"))
    assert content_digest(other) != content_digest(data)


def test_overrides_cover_types_by_subnets_in_preference_order() -> None:
    overrides = fleet_overrides(SPEC)
    assert len(overrides) == 6
    assert overrides[0] == {"InstanceType": "p4d.24xlarge", "SubnetId": "subnet-a", "Priority": 0.0}
    assert overrides[-1]["Priority"] == 1.0
    spot = fleet_overrides(
        LaunchSpec("s", ("m5.large",), "ami-1", market="spot", max_spot_price=0.25)
    )
    assert spot == [{"InstanceType": "m5.large", "Priority": 0.0, "MaxPrice": "0.25"}]


def test_run_request_for_spot() -> None:
    spec = LaunchSpec("s", ("m5.large",), "ami-1", market="spot", max_spot_price=1.0)
    attempt = Attempt("lt", 3, "m5.large", {"AvailabilityZone": "z1"}, 5, "tok", {})
    request = run_request(spec, attempt)
    assert request["LaunchTemplate"] == {"LaunchTemplateName": "lt", "Version": "3"}
    assert (request["MinCount"], request["MaxCount"]) == (1, 5)
    assert request["Placement"] == {"AvailabilityZone": "z1"}
    assert request["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] == "1"


def test_fleet_answer_instances_and_errors() -> None:
    answer = {
        "Instances": [
            {
                "InstanceIds": ["i-1", "i-2"],
                "InstanceType": "p4d.24xlarge",
                "Lifecycle": "spot",
                "LaunchTemplateAndOverrides": {"Overrides": {"SubnetId": "subnet-a"}},
            }
        ],
        "Errors": [
            {
                "ErrorCode": "InsufficientInstanceCapacity",
                "ErrorMessage": "no room",
                "LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": "g5.12xlarge"}},
            },
            {"ErrorCode": "VcpuLimitExceeded", "ErrorMessage": "quota"},
        ],
    }
    launched = fleet_launched(answer)
    assert [(x.instance_id, x.lifecycle, x.subnet) for x in launched] == [
        ("i-1", "spot", "subnet-a"),
        ("i-2", "spot", "subnet-a"),
    ]
    errors = fleet_errors(answer, shortfall=3)
    assert [(e.kind, e.instance_type, e.count) for e in errors] == [
        (ErrorKind.CAPACITY, "g5.12xlarge", 3),
        (ErrorKind.QUOTA, None, 0),
    ]
    (silent,) = fleet_errors({}, shortfall=2)
    assert silent.kind is ErrorKind.OTHER and silent.count == 2
    assert fleet_errors({}, shortfall=0) == []


def test_instance_from_describe() -> None:
    item = {
        "InstanceId": "i-1",
        "State": {"Name": "shutting-down"},
        "PrivateIpAddress": "10.0.0.5",
        "InstanceType": "p4d.24xlarge",
        "Placement": {"AvailabilityZone": "us-east-1a"},
        "InstanceLifecycle": "spot",
        "LaunchTime": datetime(2025, 1, 1, tzinfo=UTC),
        "Tags": [{"Key": TAG_NODE, "Value": "n-7"}],
    }
    inst = to_instance(item)
    assert (inst.node_name, inst.state, inst.lifecycle) == ("n-7", InstanceState.STOPPING, "spot")
    assert (inst.private_address, inst.zone) == ("10.0.0.5", "us-east-1a")
    bare = to_instance({"InstanceId": "i-2", "State": {"Name": "weird"}})
    assert (bare.state, bare.lifecycle, bare.node_name) == (
        InstanceState.UNKNOWN,
        "on-demand",
        None,
    )


def test_instance_type_from_gpu_info() -> None:
    item = {
        "InstanceType": "p4d.24xlarge",
        "VCpuInfo": {"DefaultVCpus": 96},
        "MemoryInfo": {"SizeInMiB": 1179648},
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
        "GpuInfo": {"Gpus": [{"Name": "A100", "Count": 8, "MemoryInfo": {"SizeInMiB": 40960}}]},
    }
    itype = to_instance_type(item)
    assert (itype.gpu_model, itype.gpu_count, itype.gpu_memory_mb) == ("a100", 8, 40960)
    plain = to_instance_type({"InstanceType": "m5.large", "VCpuInfo": {"DefaultVCpus": 2}})
    assert (plain.gpu_model, plain.gpu_count, plain.vcpus) == (None, 0, 2)

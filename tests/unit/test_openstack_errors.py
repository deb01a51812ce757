"""OpenStack error mapping (status / class / fault code, never text) and the pure shapes."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from keystoneauth1 import exceptions as ksa
from openstack import exceptions as sdk

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import TAG_NODE, InstanceState, LaunchError
from clustermgr.providers.openstack.client import Timing, timing_for
from clustermgr.providers.openstack.errors import (
    ERROR_KINDS,
    classify,
    fault_failure,
    is_not_found,
)
from clustermgr.providers.openstack.provider import OpenStackProvider
from clustermgr.providers.openstack.shapes import (
    gpus_of,
    instance_of,
    instance_state,
    instance_type_of,
    private_address,
    server_name,
)
from clustermgr.providers.skeleton import merge_errors

NO_VALID_HOST = "No valid host was found. There are not enough hosts available."


def http_error(
    klass: type[sdk.HttpException], status: int, details: str, headers: dict[str, str] | None = None
) -> sdk.HttpException:
    response = requests.Response()
    response.status_code = status
    response.headers.update(headers or {})
    response._content = json.dumps({"x": {"code": status, "message": details}}).encode()
    return klass(message=f"{klass.__name__}: {status}", response=response, details=details)


def settings(**extra: Any) -> ProviderSettings:
    data = {"name": "os", "type": "openstack", "region": "RegionOne", **extra}
    data.setdefault("credentials", {"cloud": "mycloud"})
    return ProviderSettings.model_validate(data)


# ---------------------------------------------------------------------- classify


def test_quota_on_create_is_quota_a_policy_refusal_is_invalid_403_elsewhere_is_auth() -> None:
    exc = http_error(sdk.ForbiddenException, 403, "Quota exceeded for instances: Requested 1")
    assert classify(exc, "create").kind is ErrorKind.QUOTA
    assert classify(exc, "create").code == "HTTP403"
    # Nova's OverQuota is HTTPForbidden wherever it is raised (create, rebuild, resize)
    assert classify(exc, "delete").kind is ErrorKind.QUOTA
    policy_elsewhere = http_error(sdk.ForbiddenException, 403, "Policy doesn't allow it")
    assert classify(policy_elsewhere).kind is ErrorKind.AUTH
    assert classify(policy_elsewhere, "delete").kind is ErrorKind.AUTH
    policy = "It is not allowed to create an interface on external network n1"
    refused = http_error(sdk.ForbiddenException, 403, policy)
    assert classify(refused, "create").kind is ErrorKind.INVALID


def test_kind_comes_from_the_status_never_the_text() -> None:
    quota_text = "Quota exceeded for instances"
    assert classify(http_error(sdk.HttpException, 429, quota_text)).kind is ErrorKind.THROTTLED
    assert classify(http_error(sdk.HttpException, 503, quota_text)).kind is ErrorKind.TRANSIENT
    assert classify(http_error(sdk.BadRequestException, 400, NO_VALID_HOST)).kind is (
        ErrorKind.INVALID
    )


def test_throttling_carries_retry_after() -> None:
    exc = http_error(sdk.HttpException, 429, "slow down", {"Retry-After": "3"})
    failure = classify(exc, "create")
    assert failure.kind is ErrorKind.THROTTLED
    assert failure.retry_after == 3.0
    assert failure.message == "slow down"
    bad_header = http_error(sdk.HttpException, 429, "slow", {"Retry-After": "soon"})
    assert classify(bad_header).retry_after is None


def test_keystone_and_connection_failures() -> None:
    unauthorized = ksa.Unauthorized(message="The request you have made requires authentication.")
    assert classify(unauthorized).kind is ErrorKind.AUTH
    assert classify(unauthorized).code == "HTTP401"
    assert classify(ksa.ConnectFailure("refused")).kind is ErrorKind.TRANSIENT
    assert classify(ksa.ConnectTimeout("slow")).kind is ErrorKind.TRANSIENT
    assert classify(ksa.EndpointNotFound("no compute")).kind is ErrorKind.INVALID
    assert classify(sdk.ConfigException("Cloud nope was not found.")).kind is ErrorKind.AUTH
    assert classify(sdk.DuplicateResource("two images")).kind is ErrorKind.INVALID
    missing = classify(sdk.NotFoundException("No Image found for x"))  # find_*, no status
    assert (missing.kind, missing.code) == (ErrorKind.INVALID, "NotFoundException")
    assert classify(requests.ConnectionError("reset")).kind is ErrorKind.TRANSIENT
    assert classify(RuntimeError("what")).kind is ErrorKind.OTHER


def test_not_found() -> None:
    assert is_not_found(http_error(sdk.NotFoundException, 404, "Instance x could not be found."))
    assert not is_not_found(http_error(sdk.HttpException, 409, "busy"))


@pytest.mark.parametrize(
    ("fault", "kind", "code"),
    [
        ({"code": 500, "message": NO_VALID_HOST}, ErrorKind.CAPACITY, "ServerFault500"),
        ({"code": 500, "message": "Exceeded maximum number of retries."}, ErrorKind.OTHER, None),
        ({"code": 500, "message": "Build of instance x aborted: y"}, ErrorKind.OTHER, None),
        ({"code": 413, "message": "Quota exceeded for instances"}, ErrorKind.QUOTA, None),
        ({"code": 503, "message": NO_VALID_HOST}, ErrorKind.TRANSIENT, None),
        ({"code": 400, "message": NO_VALID_HOST}, ErrorKind.OTHER, None),
        (None, ErrorKind.OTHER, "ServerError"),
    ],
)
def test_server_fault_by_code(
    fault: dict[str, Any] | None, kind: ErrorKind, code: str | None
) -> None:
    failure = fault_failure(fault)
    assert failure.kind is kind
    if code:
        assert failure.code == code


def test_one_table_holds_every_mapping() -> None:
    assert ERROR_KINDS[("fault", 500)] is ErrorKind.OTHER  # CAPACITY only for NoValidHost
    assert ERROR_KINDS[("fault", 413)] is ErrorKind.QUOTA
    assert ERROR_KINDS[("create", 403)] is ErrorKind.INVALID  # QUOTA when it names a quota
    assert ERROR_KINDS[429] is ErrorKind.THROTTLED
    assert ERROR_KINDS[401] is ErrorKind.AUTH


# ---------------------------------------------------------------------- provider pieces


def test_backoff_is_bounded_jittered_and_honours_retry_after() -> None:
    provider = OpenStackProvider(settings(), "c1")
    provider.timing = Timing(backoff_base_s=1.0, backoff_cap_s=5.0)
    first = [provider.backoff(0, None) for _ in range(50)]
    assert all(0.5 <= d <= 1.0 for d in first) and len(set(first)) > 1
    assert all(provider.backoff(10, None) == 5.0 for _ in range(5))
    assert provider.backoff(0, 3.0) == 3.0
    assert provider.backoff(0, 60.0) == 5.0


def test_auth_error_names_provider_and_cloud_not_secrets() -> None:
    provider = OpenStackProvider(settings(), "c1")
    err = provider.auth_error("The request you have made requires authentication.", "HTTP401")
    assert err.kind is ErrorKind.AUTH
    text = str(err)
    assert "provider os" in text and "clouds.yaml cloud 'mycloud'" in text


def test_polling_interval_from_settings_only_when_set() -> None:
    assert timing_for(settings()) == Timing()
    assert timing_for(settings(polling_interval_s=0.5)).poll_interval_s == 0.5


def test_merge_adds_counts_per_kind_code_type_zone() -> None:
    a = LaunchError(ErrorKind.CAPACITY, "ServerFault500", "first", "g1", None, 1)
    b = LaunchError(ErrorKind.CAPACITY, "ServerFault500", "second", "g1", None, 1)
    c = LaunchError(ErrorKind.CAPACITY, "ServerFault500", "other", "g2", None, 1)
    merged = merge_errors([a, b, c])
    assert [(e.instance_type, e.count, e.message) for e in merged] == [
        ("g1", 2, "first"),
        ("g2", 1, "other"),
    ]


# ---------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        ({"pci_passthrough:alias": "a100:8"}, ("a100", 8)),
        ({"pci_passthrough:alias": "A100:4, a100:4"}, ("a100", 8)),
        ({"pci_passthrough:alias": "t4"}, ("t4", 1)),
        ({"resources:PGPU": "2", "trait:CUSTOM_GPU_L40S": "required"}, ("l40s", 2)),
        ({"resources:VGPU": "1"}, (None, 1)),
        ({"hw:cpu_policy": "dedicated"}, (None, 0)),
        ({}, (None, 0)),
    ],
)
def test_gpus_from_extra_specs(specs: dict[str, str], expected: tuple[str | None, int]) -> None:
    assert gpus_of(specs) == expected


def test_instance_type_of_flavor() -> None:
    flavor = SimpleNamespace(
        name="g1.a100x8",
        vcpus=96,
        ram=1_048_576,
        extra_specs={"pci_passthrough:alias": "a100:8", "capabilities:cpu_info:arch": "aarch64"},
    )
    itype = instance_type_of(flavor)
    assert (itype.vcpus, itype.memory_mb, itype.gpu_model, itype.gpu_count) == (
        96,
        1_048_576,
        "a100",
        8,
    )
    assert itype.architecture == "aarch64"


def test_states_and_addresses() -> None:
    assert instance_state("BUILD") is InstanceState.PENDING
    assert instance_state("ACTIVE") is InstanceState.RUNNING
    assert instance_state("ACTIVE", "deleting") is InstanceState.STOPPING
    assert instance_state("SHUTOFF") is InstanceState.STOPPING
    assert instance_state("ERROR") is InstanceState.ERROR
    assert instance_state("DELETED") is InstanceState.TERMINATED
    assert instance_state("WHATEVER") is InstanceState.UNKNOWN
    addresses = {
        "public": [{"addr": "203.0.113.5", "version": 4, "OS-EXT-IPS:type": "floating"}],
        "burst": [
            {"addr": "fd00::5", "version": 6, "OS-EXT-IPS:type": "fixed"},
            {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"},
        ],
    }
    assert private_address(addresses) == "10.0.0.5"
    assert private_address({}) is None
    assert server_name("c1", "gpu-001") == "c1-gpu-001"


def test_instance_of_server_old_and_new_microversions() -> None:
    server = SimpleNamespace(
        id="abc",
        status="ACTIVE",
        task_state=None,
        metadata={TAG_NODE: "gpu-001", "clustermgr-request": "r1"},
        addresses={"n": [{"addr": "10.0.0.9", "version": 4}]},
        flavor=SimpleNamespace(id=None, original_name="g1.a100x8", name="g1.a100x8"),
        availability_zone="az1",
        launched_at="2025-01-02T03:04:05.000000",
        created_at="2025-01-02T03:00:00Z",
    )
    inst = instance_of(server, {})
    assert inst.node_name == "gpu-001" and inst.request_id == "r1"
    assert inst.instance_type == "g1.a100x8" and inst.zone == "az1"
    assert inst.private_address == "10.0.0.9"
    assert inst.launch_time is not None and inst.launch_time.tzinfo is not None
    old = SimpleNamespace(**{**vars(server), "flavor": SimpleNamespace(id="10", name="10")})
    assert instance_of(old, {"10": "g1.a100x8"}).instance_type == "g1.a100x8"


def test_every_find_call_says_ignore_missing() -> None:
    """openstacksdk 6 changes the ignore_missing default of find_*: never rely on it."""
    package = Path(__file__).resolve().parents[2] / "clustermgr" / "providers" / "openstack"
    calls = [
        (path.name, node.lineno, {k.arg for k in node.keywords})
        for path in sorted(package.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("find_")
    ]
    assert len(calls) >= 3  # image, network, key pair
    assert [(name, line) for name, line, kwargs in calls if "ignore_missing" not in kwargs] == []

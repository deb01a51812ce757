"""EC2 error codes read through the real boto3 client against moto behind FakeAws: a
representative set of ec2_codes.py's rows as EC2 sends them (the call's own error, and the
`Errors` items of a CreateFleet that started nothing), and the calls botocore really sends
for a call that keeps failing (docs/reliability.md says how many)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.aws.client import MAX_ATTEMPTS
from clustermgr.providers.aws.provider import AwsProvider
from tests.fakes.aws_harness import AwsHarness, contract_harness

pytestmark = pytest.mark.integration

RELIABILITY = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AwsHarness]:
    with contract_harness(tmp_path) as harness:
        yield harness


def provider(aws: AwsHarness) -> AwsProvider:
    made = aws.provider()
    assert isinstance(made, AwsProvider)
    return made


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("VcpuLimitExceeded", 400, ErrorKind.QUOTA),
        ("InstanceLimitExceeded", 400, ErrorKind.QUOTA),
        ("PendingVerification", 400, ErrorKind.QUOTA),
        ("InsufficientFreeAddressesInSubnet", 400, ErrorKind.CAPACITY),
        ("UnfulfillableCapacity", 400, ErrorKind.CAPACITY),
        ("InvalidPlacementGroup.Unknown", 400, ErrorKind.INVALID),
        ("TagPolicyViolation", 400, ErrorKind.INVALID),
        ("InvalidAMIID.Unavailable", 400, ErrorKind.INVALID),
    ],
)
def test_a_refused_fleet_is_read_by_its_code(
    aws: AwsHarness, code: str, status: int, kind: ErrorKind
) -> None:
    aws.fake.fail_next_launches(code, attempts=10, status=status)
    result = provider(aws).launch(aws.spec(["n-001"]), 1, f"req-{code}")
    assert not result.ok
    assert {(e.code, e.kind) for e in result.errors} == {(code, kind)}


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InsufficientInstanceCapacity", ErrorKind.CAPACITY),
        ("UnfulfillableCapacity", ErrorKind.CAPACITY),
        ("InsufficientFreeAddressesInSubnet", ErrorKind.CAPACITY),
        ("VcpuLimitExceeded", ErrorKind.QUOTA),
        ("MaxSpotInstanceCountExceeded", ErrorKind.QUOTA),
        ("InvalidParameterValue", ErrorKind.INVALID),
    ],
)
def test_fleet_error_set_entries_are_read_by_their_code(
    aws: AwsHarness, code: str, kind: ErrorKind
) -> None:
    spec = aws.spec(["n-001"])
    aws.fake.no_capacity_for(spec.instance_types)
    aws.fake.fleet_errors_with(code, f"an entry of CreateFleet's errorSet: {code}")
    result = provider(aws).launch(spec, 1, f"req-set-{code}")
    assert result.instances == []
    assert result.errors and {(e.code, e.kind) for e in result.errors} == {(code, kind)}
    assert result.errors[0].instance_type in spec.instance_types


def test_run_instances_refusals_are_read_by_their_code(aws: AwsHarness) -> None:
    aws.fake.no_fleet_api()
    aws.fake.fail_next("VcpuLimitExceeded", attempts=1, actions=["RunInstances"])
    result = provider(aws).launch(aws.spec(["n-001"]), 1, "req-run-quota")
    assert [(e.code, e.kind) for e in result.errors] == [("VcpuLimitExceeded", ErrorKind.QUOTA)]


def test_a_new_instance_not_yet_visible_to_create_tags_is_tagged_on_a_retry(
    aws: AwsHarness,
) -> None:
    aws.fake.fail_next("InvalidInstanceID.NotFound", attempts=1, actions=["CreateTags"])
    result = provider(aws).launch(aws.spec(["n-001"]), 1, "req-tags")
    assert result.ok, result.errors
    assert aws.fake.calls()["CreateTags"] >= 2


def test_a_listing_the_role_may_not_make_is_auth(aws: AwsHarness) -> None:
    aws.fake.fail_next("UnauthorizedOperation", attempts=1, actions=["DescribeInstances"])
    with pytest.raises(ProviderError) as caught:
        provider(aws).list_instances()
    assert (caught.value.kind, caught.value.code) == (ErrorKind.AUTH, "UnauthorizedOperation")


def test_botocore_sends_max_attempts_calls_as_the_doc_says(aws: AwsHarness) -> None:
    prov = provider(aws)
    aws.fake.fail_next("InternalError", attempts=50, actions=["DescribeInstances"], status=500)
    before = aws.fake.calls().get("DescribeInstances", 0)
    with pytest.raises(ProviderError) as caught:
        prov.list_instances()
    assert caught.value.kind is ErrorKind.TRANSIENT
    sent = aws.fake.calls()["DescribeInstances"] - before
    assert sent == MAX_ATTEMPTS == 5
    said = re.findall(r"botocore: (\d+) calls", RELIABILITY.read_text())
    assert said and {int(n) for n in said} == {sent}

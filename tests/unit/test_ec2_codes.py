"""Every row of ec2_codes.py, raised as the botocore ClientError EC2's answer becomes (or as
botocore's own exception), is classified as the row says."""

from __future__ import annotations

import botocore.exceptions
import pytest
from botocore.exceptions import ClientError

from clustermgr.core.errors import ErrorKind, ErrorRow
from clustermgr.providers.aws.ec2_codes import BOTOCORE_EXCEPTIONS, EC2_CODES
from clustermgr.providers.aws.errors import classify, kind_of
from clustermgr.providers.aws.shapes import fleet_errors

pytestmark = pytest.mark.unit

# families (a code before its first dot) whose documented members the table covers at once
FAMILY_MEMBERS = {
    "InvalidAMIID": ("Malformed", "NotFound", "Unavailable"),
    "InvalidSubnetID": ("NotFound", "Malformed"),
    "InvalidGroup": ("NotFound",),
    "InvalidGroupId": ("Malformed",),
    "InvalidSecurityGroupID": ("NotFound",),
    "InvalidKeyPair": ("NotFound", "Format"),
    "InvalidLaunchTemplateName": ("NotFoundException", "MalformedException"),
    "InvalidLaunchTemplateId": ("NotFound", "Malformed", "VersionNotFound"),
    "InvalidPlacementGroup": ("Unknown", "Duplicate"),
    "InvalidCapacityReservationId": ("NotFound", "Malformed"),
    "InvalidNetworkInterfaceID": ("NotFound",),
    "InvalidVpcID": ("NotFound",),
    "InvalidZone": ("NotFound",),
    "InvalidUserData": ("Malformed",),
    "InvalidTagKey": ("Malformed",),
    "AuthFailure": ("ServiceLinkedRoleCreationNotPermitted",),
}


def client_error(code: str, status: int = 400, operation: str = "RunInstances") -> ClientError:
    response = {
        "Error": {"Code": code, "Message": "anything at all: capacity quota throttled"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)  # type: ignore[arg-type]


@pytest.mark.parametrize("row", EC2_CODES, ids=lambda r: r.code)
def test_every_ec2_code_is_classified_as_its_row_says(row: ErrorRow) -> None:
    failure = classify(client_error(row.code))
    assert (failure.kind, failure.code) == (row.kind, row.code)
    assert kind_of(f"Server.{row.code}") is row.kind
    assert kind_of(f"Client.{row.code}") is row.kind
    for member in FAMILY_MEMBERS.get(row.code, ()):
        exact = next((r.kind for r in EC2_CODES if r.code == f"{row.code}.{member}"), None)
        assert kind_of(f"{row.code}.{member}") is (exact or row.kind)
    assert row.why and "\n" not in row.why


@pytest.mark.parametrize("row", EC2_CODES, ids=lambda r: r.code)
def test_every_ec2_code_in_a_fleet_error_set_entry_is_read_the_same(row: ErrorRow) -> None:
    answer = {
        "Errors": [
            {
                "ErrorCode": row.code,
                "ErrorMessage": "any text",
                "LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": "m5.large"}},
            }
        ]
    }
    (error,) = fleet_errors(answer, 1)
    assert (error.kind, error.code, error.instance_type) == (row.kind, row.code, "m5.large")


@pytest.mark.parametrize("row", BOTOCORE_EXCEPTIONS, ids=lambda r: r.code)
def test_every_botocore_exception_row_names_a_botocore_class(row: ErrorRow) -> None:
    klass = getattr(botocore.exceptions, row.code)
    assert issubclass(klass, botocore.exceptions.BotoCoreError)
    assert kind_of(row.code) is row.kind


def test_codes_appear_once_and_no_kind_is_other() -> None:
    codes = [r.code for r in (*EC2_CODES, *BOTOCORE_EXCEPTIONS)]
    assert len(codes) == len(set(codes))
    assert all(r.kind is not ErrorKind.OTHER for r in EC2_CODES)


def test_account_limits_are_quota_and_no_capacity_in_any_wording_is_capacity() -> None:
    by_code = {r.code: r.kind for r in EC2_CODES}
    for code in ("InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"):
        assert by_code[code] is ErrorKind.QUOTA
    wordings = [c for c in by_code if c.startswith("Insufficient") or c.endswith("Capacity")]
    assert wordings and all(by_code[c] is ErrorKind.CAPACITY for c in wordings)

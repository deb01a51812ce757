"""The AWS clients read EC2's timestamps (an instance's LaunchTime) with datetime instead of
botocore's dateutil parser: every form EC2 or an EC2-compatible cloud may answer reads as the
same instant as botocore's own parser reads it."""

from __future__ import annotations

import pytest
from botocore.utils import parse_timestamp

from clustermgr.providers.aws.client import fast_timestamp

FORMS = [
    "2026-11-26T05:40:00.000Z",  # EC2's own form
    "2026-11-26T05:40:00Z",
    "2026-11-26T05:40:00.123456+00:00",
    "2026-11-26T07:40:00+02:00",
    "2026-11-26T05:40:00",  # no zone: botocore's own reading, whatever it is
    "Thu, 26 Nov 2026 05:40:00 GMT",  # RFC 822
    1795669200,  # epoch seconds
    "1795669200",
]


@pytest.mark.parametrize("value", FORMS, ids=str)
def test_a_timestamp_reads_as_the_instant_botocore_reads(value: object) -> None:
    theirs = parse_timestamp(value)
    ours = fast_timestamp(value)
    assert ours == theirs
    assert (ours.utcoffset() is None) == (theirs.utcoffset() is None)


def test_a_malformed_timestamp_fails_as_botocore_fails() -> None:
    with pytest.raises(ValueError):
        fast_timestamp("not a time")

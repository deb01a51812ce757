"""Launching into AWS reserved capacity (issue 24 item 2), through boto3 against FakeAws:
On-Demand Capacity Reservations (open, targeted) and Capacity Blocks, each with a finite
capacity in the fake (tests/fakes/aws_reservations.py), so "full" is real.

What the provider sends is read with botocore event hooks on its own client, as in
test_aws_provider.py; which reservation an instance runs in is what DescribeInstances says.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import LaunchSpec, ReservationTarget
from tests.fakes.aws_harness import AwsHarness, contract_harness
from tests.fakes.aws_reservations import FakeReservation
from tests.integration.test_aws_provider import Calls, provider

pytestmark = pytest.mark.integration

ITYPE = "p5.48xlarge"
ZONE = "us-east-1a"
RES = "cr-0a1b2c3d4e5f60718"
BLOCK = "cr-0b10c4b10c4b10c4b"


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AwsHarness]:
    with contract_harness(tmp_path) as harness:
        yield harness


def spec(aws: AwsHarness, count: int, target: ReservationTarget) -> LaunchSpec:
    names = [f"gpu-{i:03d}" for i in range(1, count + 1)]
    return replace(aws.spec(names, [ITYPE]), subnets=(), zones=(ZONE,), reservation=target)


def reservation_of(aws: AwsHarness, instance_ids: list[str]) -> dict[str, str | None]:
    found = aws.client().describe_instances(InstanceIds=instance_ids)["Reservations"]
    return {i["InstanceId"]: i.get("CapacityReservationId") for r in found for i in r["Instances"]}


def add(aws: AwsHarness, rid: str, total: int, **more: Any) -> None:
    aws.fake.add_capacity_reservation(FakeReservation(rid, ITYPE, ZONE, total, **more))


def test_targeted_reservation_carries_the_target_and_the_instances_run_in_it(
    aws: AwsHarness,
) -> None:
    add(aws, RES, 4)
    prov = provider(aws)
    calls = Calls(prov)
    result = prov.launch(spec(aws, 3, ReservationTarget("reservation", RES)), 3, "req-cr-t")
    assert result.ok and len(result.instances) == 3
    (made,) = calls.of("CreateLaunchTemplate")
    assert made["LaunchTemplateData"]["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": RES}
    }
    (fleet,) = calls.of("CreateFleet")
    assert fleet["OnDemandOptions"]["CapacityReservationOptions"] == {
        "UsageStrategy": "use-capacity-reservations-first"
    }
    ids = [i.instance_id for i in result.instances]
    assert set(reservation_of(aws, ids).values()) == {RES}
    (facts,) = prov.reservations([ReservationTarget("reservation", RES)])
    assert (facts.total, facts.in_use, facts.available) == (4, 3, 1)


def test_open_reservation_holds_what_it_can_and_ec2_runs_the_rest_on_demand(
    aws: AwsHarness,
) -> None:
    add(aws, RES, 2, match="open")
    prov = provider(aws)
    calls = Calls(prov)
    target = ReservationTarget("reservation", RES, preference="open", fallback=True)
    result = prov.launch(spec(aws, 3, target), 3, "req-cr-open")
    assert result.ok
    (made,) = calls.of("CreateLaunchTemplate")
    assert made["LaunchTemplateData"]["CapacityReservationSpecification"] == {
        "CapacityReservationPreference": "open"
    }
    seated = reservation_of(aws, [i.instance_id for i in result.instances])
    assert Counter(seated.values()) == {RES: 2, None: 1}


def test_full_reservation_falls_back_to_on_demand_and_says_so(
    aws: AwsHarness, caplog: pytest.LogCaptureFixture
) -> None:
    add(aws, RES, 2)
    prov = provider(aws)
    calls = Calls(prov)
    with caplog.at_level(logging.WARNING, logger="clustermgr.providers.aws.provider"):
        result = prov.launch(spec(aws, 5, ReservationTarget("reservation", RES)), 5, "req-fb")
    assert result.ok and len(result.instances) == 5 and not result.errors
    seated = reservation_of(aws, [i.instance_id for i in result.instances])
    assert Counter(seated.values()) == {RES: 2, None: 3}
    assert f"capacity reservation {RES} held 2 of 5 instance(s); launching the other 3 " in (
        caplog.text
    )
    assert "(reservation_fallback = on-demand)" in caplog.text
    fleets = calls.of("CreateFleet")
    assert [f["TargetCapacitySpecification"]["TotalTargetCapacity"] for f in fleets] == [5, 3]
    # the fallback's own launch template has no reservation in it
    templates = {t["LaunchTemplateName"]: t for t in calls.of("CreateLaunchTemplate")}
    fallback = next(t for n, t in templates.items() if n.endswith("-on-demand"))
    assert "CapacityReservationSpecification" not in fallback["LaunchTemplateData"]
    # the same request again (a relaunch after a crash) makes no new instance
    again = prov.launch(spec(aws, 5, ReservationTarget("reservation", RES)), 5, "req-fb")
    assert {i.instance_id for i in again.instances} == set(seated)


def test_full_reservation_without_fallback_fails_naming_it(aws: AwsHarness) -> None:
    add(aws, RES, 1)
    prov = provider(aws)
    target = ReservationTarget("reservation", RES, fallback=False)
    result = prov.launch(spec(aws, 3, target), 3, "req-nofb")
    assert len(result.instances) == 1 and result.missing == 2
    (error,) = result.errors
    assert error.kind is ErrorKind.CAPACITY and error.code == "ReservationCapacityExceeded"
    assert error.count == 2
    assert f"capacity reservation {RES} cannot hold the launch (reservation_fallback = none)" in (
        error.reason()
    )
    assert reservation_of(aws, [result.instances[0].instance_id]) == {
        result.instances[0].instance_id: RES
    }


def test_a_job_launched_whole_goes_on_demand_whole_when_its_reservation_is_short(
    aws: AwsHarness, caplog: pytest.LogCaptureFixture
) -> None:
    """All or nothing (issue 24 item 1): a reservation that holds 2 of the job's 4 starts
    none of them (MinTargetCapacity), and reservation_fallback = on-demand launches the
    whole job on-demand, not the 2 it was short."""
    add(aws, RES, 2)
    prov = provider(aws)
    calls = Calls(prov)
    whole = replace(spec(aws, 4, ReservationTarget("reservation", RES)), all_or_nothing=True)
    with caplog.at_level(logging.WARNING, logger="clustermgr.providers.aws.provider"):
        result = prov.launch(whole, 4, "req-whole-fb")
    assert result.ok and len(result.instances) == 4, result.errors
    assert set(reservation_of(aws, [i.instance_id for i in result.instances]).values()) == {None}
    assert f"capacity reservation {RES} held 0 of 4 instance(s); launching the other 4 " in (
        caplog.text
    )
    fleets = calls.of("CreateFleet")
    assert [f["OnDemandOptions"]["MinTargetCapacity"] for f in fleets] == [4, 4]
    assert fleets[0]["ClientToken"] != fleets[1]["ClientToken"]


def test_a_job_launched_whole_without_fallback_starts_nothing_naming_its_reservation(
    aws: AwsHarness,
) -> None:
    add(aws, RES, 2)
    prov = provider(aws)
    target = ReservationTarget("reservation", RES, fallback=False)
    whole = replace(spec(aws, 4, target), all_or_nothing=True)
    result = prov.launch(whole, 4, "req-whole-nofb")
    assert result.instances == [] and result.missing == 4
    reasons = " ".join(e.reason() for e in result.errors)
    assert f"capacity reservation {RES} cannot hold the launch (reservation_fallback = none)" in (
        reasons
    )
    assert reasons.startswith("(Code:CAPACITY) AllOrNothing: all-or-nothing: got 0 of 4"), reasons
    assert not [i for i in prov.list_instances().values() if i.state.value != "terminated"]


def test_capacity_block_launches_only_inside_its_window(aws: AwsHarness) -> None:
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    add(
        aws, BLOCK, 2, reservation_type="capacity-block", start=later, end=later + timedelta(days=2)
    )
    prov = provider(aws)
    calls = Calls(prov)
    target = ReservationTarget("capacity-block", BLOCK)
    result = prov.launch(spec(aws, 2, target), 2, "req-block-early")
    assert result.instances == [] and result.missing == 2
    (error,) = result.errors
    assert error.kind is ErrorKind.CAPACITY and error.code == "CapacityBlockNotActive"
    assert f"capacity block {BLOCK} starts at {later:%Y-%m-%d %H:%M} UTC" in error.message
    assert calls.of("CreateFleet") == [] and calls.of("RunInstances") == []
    assert aws.fake.calls().get("CreateFleet", 0) == 0


def test_capacity_block_inside_its_window_sends_the_block_shapes(aws: AwsHarness) -> None:
    began = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    add(
        aws, BLOCK, 2, reservation_type="capacity-block", start=began, end=began + timedelta(days=1)
    )
    prov = provider(aws)
    calls = Calls(prov)
    result = prov.launch(spec(aws, 2, ReservationTarget("capacity-block", BLOCK)), 2, "req-block")
    assert result.ok
    (fleet,) = calls.of("CreateFleet")
    assert fleet["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "capacity-block"
    (made,) = calls.of("CreateLaunchTemplate")
    assert made["LaunchTemplateData"]["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert set(reservation_of(aws, [i.instance_id for i in result.instances]).values()) == {BLOCK}
    (facts,) = prov.reservations([ReservationTarget("capacity-block", BLOCK)])
    assert facts.kind == "capacity-block" and (facts.total, facts.available) == (2, 0)
    assert facts.start == began and facts.end == began + timedelta(days=1)


def test_unknown_capacity_block_is_invalid_before_any_launch(aws: AwsHarness) -> None:
    prov = provider(aws)
    calls = Calls(prov)
    from clustermgr.core.errors import ProviderError

    with pytest.raises(ProviderError) as raised:
        prov.launch(spec(aws, 1, ReservationTarget("capacity-block", BLOCK)), 1, "req-none")
    assert raised.value.kind is ErrorKind.INVALID and BLOCK in str(raised.value)
    assert calls.of("CreateFleet") == []

"""What a relaunch adopts on AWS (providers/aws/adoption.py) and how it rebuilds the order
(scaling/act.py): from DescribeInstances items and stored identities, no cloud."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from clustermgr.db.ownership import IssuedLaunch, LaunchIdentity
from clustermgr.providers.aws.adoption import adopt, choose
from clustermgr.scaling.act import broken_whole, relaunch_order
from tests.unit.test_policies import view

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 29, 4, 0, tzinfo=UTC)
NODES = ("g1", "g2", "g3", "g4")


def item(iid: str, node: str = "", state: str = "running", index: int = 0) -> dict[str, Any]:
    tags = [{"Key": "clustermgr-request", "Value": "r-1"}]
    if node:
        tags.append({"Key": "clustermgr-node", "Value": node})
    return {
        "InstanceId": iid,
        "State": {"Name": state},
        "Tags": tags,
        "LaunchTime": T0,
        "AmiLaunchIndex": index,
        "InstanceType": "p4d.24xlarge",
        "Placement": {"AvailabilityZone": "us-east-1a"},
    }


def test_named_instances_are_kept_first_one_per_node_and_the_rest_is_extra() -> None:
    items = [
        item("i-a", index=0),
        item("i-b", "g2"),
        item("i-c", "g2"),  # a second instance named g2: a duplicate
        item("i-d", index=1),
        item("i-e", index=2),
        item("i-f", index=3),
        item("i-x", "g9"),  # another node's: never taken
        item("i-t", state="terminated"),
    ]
    choice = choose(items, NODES, 4, whole=False)
    assert [k.instance_id for k in choice.keep] == ["i-b", "i-a", "i-d", "i-e"]
    assert sorted(choice.extra) == ["i-c", "i-f"]


def test_unnamed_instances_go_in_launch_order_not_id_order() -> None:
    items = [item("i-z", index=0), item("i-a", index=1)]
    assert [k.instance_id for k in choose(items, NODES[:2], 2, whole=False).keep] == [
        "i-z",
        "i-a",
    ]


def test_part_of_an_all_or_nothing_set_is_released_and_the_set_tried_whole() -> None:
    released: list[list[str]] = []

    def release(ids: list[str]) -> list[str]:
        released.append(sorted(ids))
        return []

    got = adopt([item("i-a", "g1"), item("i-b")], NODES, True, "r-1", release)
    assert (got.keep, got.missing, got.part) == ([], 4, "a2")
    assert released == [["i-a", "i-b"]]


def test_what_a_partial_set_could_not_release_is_returned_alone() -> None:
    got = adopt([item("i-a", "g1"), item("i-b")], NODES, True, "r-1", lambda ids: ["i-b"])
    assert ([k.instance_id for k in got.keep], got.missing) == (["i-b"], 0)


def test_nothing_found_reissues_as_issued_and_some_found_only_the_rest() -> None:
    none = adopt([], NODES, False, "r-1", lambda ids: [])
    assert (none.keep, none.missing, none.part) == ([], 4, "")  # the first client tokens
    some = adopt([item("i-a"), item("i-b", "g3")], NODES, False, "r-1", lambda ids: [])
    assert (len(some.keep), some.missing, some.part) == (2, 2, "a2")
    whole = adopt([item(f"i-{n}", n) for n in NODES], NODES, True, "r-1", lambda ids: [])
    assert (len(whole.keep), whole.missing) == (4, 0)


def issued(identity: LaunchIdentity | None) -> IssuedLaunch:
    return IssuedLaunch("r-1", "aws1", "gpu", T0, identity)


def test_the_relaunch_order_is_the_stored_one_in_its_node_order() -> None:
    stored = LaunchIdentity(
        nodes=("g3", "g1", "g2"), jobs=("7",), market="spot", all_or_nothing=True
    )
    order = relaunch_order(view([], []), "r-1", ["g1", "g2", "g3"], issued(stored))
    assert order.nodes == ("g3", "g1", "g2")
    assert (order.jobs, order.market, order.all_or_nothing) == (("7",), "spot", True)
    assert order.resume and order.stored == stored
    assert broken_whole(order, issued(stored)) == ""


def test_an_all_or_nothing_request_with_a_node_gone_is_not_relaunched() -> None:
    stored = LaunchIdentity(nodes=("g1", "g2", "g3"), all_or_nothing=True)
    order = relaunch_order(view([], []), "r-1", ["g1", "g2"], issued(stored))
    why = broken_whole(order, issued(stored))
    assert why.startswith("(Code:OTHER) AllOrNothing: all-or-nothing: only 2 of 3 nodes"), why

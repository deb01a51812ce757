"""Server groups on OpenStack, through openstacksdk against the Nova fake
(tests/fakes/openstack_server_groups.py): a per-launch group (affinity, or soft-affinity)
made before the servers, each server booted with the `group` scheduler hint, found again
by a retried launch, listed with its request and deleted; a template's static
placement_group is looked up and given as the hint too."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.launch_groups import PlacementGroups, group_name
from tests.fakes.openstack_harness import CLUSTER, OpenStackHarness, contract_harness

pytestmark = pytest.mark.integration


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[OpenStackHarness]:
    with contract_harness(tmp_path) as made:
        yield made


def groups(harness: OpenStackHarness) -> list[dict[str, object]]:
    return list(harness.fake.server_groups.groups.values())


def test_a_multi_server_launch_goes_into_a_server_group_of_its_own(
    harness: OpenStackHarness,
) -> None:
    provider = harness.os_provider()
    assert isinstance(provider, PlacementGroups)
    spec = replace(harness.spec(["sg-1", "sg-2"]), launch_group="soft-affinity")
    result = provider.launch(spec, 2, "r-00000000000000c1")
    assert result.ok, result.errors
    (group,) = groups(harness)
    assert group["name"] == group_name(CLUSTER, "openstack-gpu", "r-00000000000000c1")
    assert group["policy"] == "soft-affinity"
    assert sorted(group["members"]) == sorted(i.instance_id for i in result.instances)  # type: ignore[call-overload]

    again = provider.launch(spec, 2, "r-00000000000000c1")  # a retry: the same group
    assert {i.instance_id for i in again.instances} == {i.instance_id for i in result.instances}
    assert len(groups(harness)) == 1

    (listed,) = provider.placement_groups()
    assert (listed.request_id, listed.group_id) == ("r-00000000000000c1", group["id"])
    provider.terminate([i.instance_id for i in result.instances], "stop")
    assert provider.delete_placement_group(listed) is True
    assert groups(harness) == [] and provider.placement_groups() == []

    single = replace(harness.spec(["sg-3"]), launch_group="affinity")
    assert provider.launch(single, 1, "r-00000000000000c2").ok
    assert groups(harness) == []


def test_a_static_placement_group_is_the_servers_hint(harness: OpenStackHarness) -> None:
    made = harness.fake.server_groups.create(
        {"server_group": {"name": "hpc-block", "policy": "affinity"}}
    )["server_group"]
    provider = harness.os_provider()
    spec = replace(harness.spec(["st-1", "st-2"]), placement_group="hpc-block")
    result = provider.launch(spec, 2, "r-00000000000000c3")
    assert result.ok, result.errors
    (group,) = groups(harness)
    assert group["id"] == made["id"]
    assert sorted(group["members"]) == sorted(i.instance_id for i in result.instances)  # type: ignore[call-overload]

    missing = replace(harness.spec(["st-3"]), placement_group="no-such-group")
    with pytest.raises(ProviderError) as caught:
        provider.launch(missing, 1, "r-00000000000000c4")
    assert caught.value.kind is ErrorKind.INVALID and "placement_group" in str(caught.value)

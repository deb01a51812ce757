"""The provider contract (tests/integration/test_provider_contract.py) against a real Nova:
Debian 12's OpenStack Zed control plane, started for this session (tests/services/openstack).
Capacity runs out for real (SmallFakeDriver's host holds four g1.small: NoValidHost from the
scheduler) and quota is Nova's own refusal. Nova has no throttling of its own: THROTTLED
stays a fake-only reaction (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import TAG_CLUSTER, TAG_NODE, TAG_REQUEST
from tests.integration.test_provider_contract import (  # noqa: F401 - collected here too
    check_launch_error_is_typed,
    live,
    test_check_passes_and_catalog_has_types,
    test_launch_binds_names_and_tags,
    test_partial_launch_returns_what_started_and_a_capacity_error,
    test_rejected_credentials_are_auth_and_never_leak,
    test_retry_with_same_request_id_makes_no_second_instance,
    test_terminate_removes_from_list_and_is_idempotent,
    test_unknown_instance_type_is_invalid_before_any_launch,
)
from tests.realnova.harness import RealNovaHarness, contract_harness
from tests.services.openstack.controlplane import ControlPlane


@pytest.fixture
def harness(plane: ControlPlane, tmp_path: Path) -> Iterator[RealNovaHarness]:
    with contract_harness(plane, tmp_path) as made:
        yield made


@pytest.mark.parametrize("kind", [ErrorKind.CAPACITY, ErrorKind.QUOTA])
def test_real_nova_refusals_come_back_typed(harness: RealNovaHarness, kind: ErrorKind) -> None:
    check_launch_error_is_typed(harness, kind)


def test_no_valid_host_falls_back_to_the_next_flavor(harness: RealNovaHarness) -> None:
    """g1.quad (16 GiB) fits no host: Nova's scheduler says NoValidHost and the provider
    launches the node with the next flavor of the spec."""
    provider = harness.provider()
    spec = harness.spec(["n-001"], instance_types=["g1.quad", "g1.small"])
    result = provider.launch(spec, 1, "req-fallback-1")
    assert [i.instance_type for i in result.instances] == ["g1.small"]
    assert [(e.kind, e.instance_type) for e in result.errors] == [(ErrorKind.CAPACITY, "g1.quad")]
    assert "No valid host" in result.errors[0].message
    assert live(provider.list_instances()) == [result.instances[0].instance_id]  # type: ignore[arg-type]


def test_listing_is_by_tag_and_skips_other_servers(harness: RealNovaHarness) -> None:
    """Servers this cluster did not make (an admin's, another cluster's) are never listed."""
    harness.limit_capacity(1)  # one admin server without our tags
    provider = harness.provider()
    other = harness.provider(cluster="another")
    mine = provider.launch(harness.spec(["n-001"]), 1, "req-tags-1")
    assert mine.ok, mine.errors
    listed = provider.list_instances()
    assert list(listed) == [mine.instances[0].instance_id]
    tags = listed[mine.instances[0].instance_id].tags
    assert (tags[TAG_CLUSTER], tags[TAG_NODE], tags[TAG_REQUEST]) == (
        "contract",
        "n-001",
        "req-tags-1",
    )
    assert other.list_instances() == {}

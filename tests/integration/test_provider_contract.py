"""One contract, four providers: launch, partial launch, idempotent retry, list, terminate,
and each error kind, through each cloud's real SDK against its local fake."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import TAG_NODE, TAG_REQUEST, InstanceState
from tests.fakes.harness import ContractHarness

pytestmark = pytest.mark.integration

PROVIDER_TYPES = ["aws", "azure", "openstack", "local"]


@pytest.fixture(params=PROVIDER_TYPES)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ContractHarness]:
    module = importlib.import_module(f"tests.fakes.{request.param}_harness")
    with module.contract_harness(tmp_path) as made:
        yield made


def live(instances: dict[str, object]) -> list[str]:
    return sorted(
        iid
        for iid, inst in instances.items()
        if getattr(inst, "state") not in (InstanceState.TERMINATED,)  # noqa: B009
    )


def test_launch_binds_names_and_tags(harness: ContractHarness) -> None:
    provider = harness.provider()
    result = provider.launch(harness.spec(["n-001", "n-002"]), 2, "req-launch-1")
    assert result.ok, result.errors
    assert sorted(i.node_name or "" for i in result.instances) == ["n-001", "n-002"]
    listed = provider.list_instances()
    assert sorted(listed) == sorted(i.instance_id for i in result.instances)
    for inst in listed.values():
        assert inst.tags[TAG_REQUEST] == "req-launch-1"
        assert inst.tags[TAG_NODE] == inst.node_name


def test_retry_with_same_request_id_makes_no_second_instance(harness: ContractHarness) -> None:
    provider = harness.provider()
    spec = harness.spec(["n-001", "n-002"])
    first = provider.launch(spec, 2, "req-idem-1")
    again = provider.launch(spec, 2, "req-idem-1")
    assert first.ok and again.ok
    assert sorted(i.instance_id for i in again.instances) == sorted(
        i.instance_id for i in first.instances
    )
    assert len(live(provider.list_instances())) == 2  # type: ignore[arg-type]


def test_partial_launch_returns_what_started_and_a_capacity_error(
    harness: ContractHarness,
) -> None:
    provider = harness.provider()
    harness.limit_capacity(1)
    result = provider.launch(harness.spec(["n-001", "n-002", "n-003"]), 3, "req-partial-1")
    assert len(result.instances) == 1
    assert result.missing == 2
    assert any(e.kind is ErrorKind.CAPACITY for e in result.errors)


def test_terminate_removes_from_list_and_is_idempotent(harness: ContractHarness) -> None:
    provider = harness.provider()
    result = provider.launch(harness.spec(["n-001", "n-002"]), 2, "req-term-1")
    doomed = [result.instances[0].instance_id]
    provider.terminate(doomed, "req-term-2")
    provider.terminate(doomed, "req-term-2")
    remaining = live(provider.list_instances())  # type: ignore[arg-type]
    assert remaining == [result.instances[1].instance_id]


@pytest.mark.parametrize("kind", [ErrorKind.CAPACITY, ErrorKind.QUOTA, ErrorKind.THROTTLED])
def test_launch_errors_come_back_typed_in_the_result(
    harness: ContractHarness, kind: ErrorKind
) -> None:
    provider = harness.provider()
    harness.fail_next_launches(kind, attempts=20)
    result = provider.launch(harness.spec(["n-001"]), 1, f"req-fail-{kind.value.lower()}")
    assert result.instances == []
    assert [e.kind for e in result.errors][:1] == [kind]
    assert live(provider.list_instances()) == []  # type: ignore[arg-type]


def test_unknown_instance_type_is_invalid_before_any_launch(harness: ContractHarness) -> None:
    provider = harness.provider()
    spec = harness.spec(["n-001"], instance_types=[harness.unknown_instance_type()])
    with pytest.raises(ProviderError) as caught:
        provider.launch(spec, 1, "req-invalid-1")
    assert caught.value.kind is ErrorKind.INVALID
    assert spec.template in str(caught.value)
    assert live(provider.list_instances()) == []  # type: ignore[arg-type]


def test_rejected_credentials_are_auth_and_never_leak(
    harness: ContractHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = harness.bad_credentials_provider()
    with pytest.raises(ProviderError) as caught:
        provider.list_instances()
    assert caught.value.kind is ErrorKind.AUTH
    checks = provider.check()
    assert not all(c.ok for c in checks)
    text = str(caught.value) + caplog.text + " ".join(c.detail for c in checks)
    for secret in harness.secrets():
        assert secret not in text


def test_check_passes_and_catalog_has_types(harness: ContractHarness) -> None:
    provider = harness.provider()
    checks = provider.check()
    assert checks and all(c.ok for c in checks), checks
    assert len(provider.catalog()) >= 1

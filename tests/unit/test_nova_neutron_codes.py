"""Every row of nova_neutron_codes.py checked against the Zed sources `.ci/install-debs`
installs (python3-nova, python3-neutron, python3-neutron-lib) and classified as it says: a
Nova row from the answer Nova makes of that exception (its msg_fmt filled in, the status
servers.py gives it, or the server fault), a Neutron row from a NeutronError body."""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

import openstack.exceptions as sdk
import pytest
import requests

from clustermgr.core.errors import ErrorKind, ErrorRow
from clustermgr.providers.openstack.errors import classify, fault_failure
from clustermgr.providers.openstack.nova_neutron_codes import (
    NEUTRON_TYPES,
    NOVA_EXCEPTIONS,
    NovaRow,
)

pytestmark = pytest.mark.unit

DIST = Path("/usr/lib/python3/dist-packages")
NOVA = DIST / "nova"
SERVERS_PY = NOVA / "api" / "openstack" / "compute" / "servers.py"
needs_sources = pytest.mark.skipif(
    not (NOVA / "exception.py").exists() or not (DIST / "neutron_lib").exists(),
    reason="python3-nova / python3-neutron-lib not installed (.ci/install-debs)",
)


@cache
def nova_classes() -> dict[str, tuple[list[str], int | None, str]]:
    """nova/exception.py: class -> (bases, own `code`, msg_fmt)."""
    found: dict[str, tuple[list[str], int | None, str]] = {}
    for node in ast.parse((NOVA / "exception.py").read_text()).body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
        code: int | None = None
        msg = ""
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if name == "code":
                    code = ast.literal_eval(stmt.value)
                elif name == "msg_fmt" and isinstance(stmt.value, ast.Call):
                    msg = ast.literal_eval(stmt.value.args[0])
        found[node.name] = (bases, code, msg)
    return found


def ancestry(name: str) -> list[str]:
    chain = [name]
    while chain[-1] in nova_classes() and nova_classes()[chain[-1]][0]:
        chain.append(nova_classes()[chain[-1]][0][0])
    return chain


def own_code(name: str) -> int:
    return next((nova_classes()[n][1] for n in ancestry(name) if nova_classes()[n][1]), 500)  # type: ignore[return-value]


def formatted(msg_fmt: str) -> str:
    """A msg_fmt as Nova formats it (placeholders filled)."""
    return re.sub(r"%\((\w+)\)[sd]", lambda m: "1" if m.group(0).endswith("d") else m[1], msg_fmt)


def nova_answer(status: int, message: str) -> sdk.HttpException:
    """An HTTP error as Nova's API answers it, raised as openstacksdk raises it."""
    response = requests.Response()
    response.status_code = status
    response.headers["Content-Type"] = "application/json"
    response._content = json.dumps({"forbidden": {"code": status, "message": message}}).encode()
    return sdk.HttpException(message=f"HttpException: {status}", response=response, details=message)


def neutron_answer(status: int, kind: str, message: str) -> sdk.HttpException:
    response = requests.Response()
    response.status_code = status
    response.headers["Content-Type"] = "application/json"
    body = {"NeutronError": {"type": kind, "message": message, "detail": ""}}
    response._content = json.dumps(body).encode()
    return sdk.HttpException(message=f"HttpException: {status}", response=response, details=message)


@needs_sources
@pytest.mark.parametrize("row", NOVA_EXCEPTIONS, ids=lambda r: f"{r.exception}-{r.status}")
def test_every_nova_row_is_what_nova_raises(row: NovaRow) -> None:
    assert row.exception in nova_classes(), row.exception
    msg_fmt = nova_classes()[row.exception][2]
    if row.seen_in == "nova/exception.py":
        assert row.text in msg_fmt
    else:
        assert row.text in (DIST / row.seen_in).read_text()
    chain = ancestry(row.exception)
    if row.status == 403:  # servers.py: OverQuota and Forbidden become HTTPForbidden
        assert "OverQuota" in chain or "Forbidden" in chain
    elif row.status == 409:  # servers.py create: these become HTTPConflict
        assert f"exception.{row.exception}," in SERVERS_PY.read_text()
    else:
        assert own_code(row.exception) == row.status
    assert row.why and "\n" not in row.why


@needs_sources
@pytest.mark.parametrize("row", NOVA_EXCEPTIONS, ids=lambda r: f"{r.exception}-{r.status}")
def test_every_nova_row_is_classified_as_it_says(row: NovaRow) -> None:
    message = (
        formatted(nova_classes()[row.exception][2])
        if row.seen_in == "nova/exception.py"
        else f"The number of defined ports: 3 {row.text}2"
    )
    if row.status in (500, 413):  # a server fault
        assert fault_failure({"code": row.status, "message": message}).kind is row.kind
    else:
        assert classify(nova_answer(row.status, message), "create").kind is row.kind


def test_a_subnet_without_a_free_address_is_capacity_not_a_build_failure() -> None:
    # nova/compute/manager.py _build_and_run_instance: NoMoreFixedIps -> BuildAbortException
    message = (
        "Build of instance 5f0c aborted: Failed to allocate the network(s) with error No "
        "fixed IP addresses available for network: 7d1e, not rescheduling."
    )
    assert fault_failure({"code": 500, "message": message}).kind is ErrorKind.CAPACITY
    broken = "Build of instance 5f0c aborted: Image 1 is unacceptable: no data"
    assert fault_failure({"code": 500, "message": broken}).kind is ErrorKind.OTHER


def test_port_quota_is_quota_and_a_policy_refusal_stays_invalid() -> None:
    ports = nova_answer(403, "Maximum number of ports exceeded")
    assert classify(ports, "create").kind is ErrorKind.QUOTA
    policy = nova_answer(403, "It is not allowed to create an interface on external network n")
    assert classify(policy, "create").kind is ErrorKind.INVALID


@needs_sources
@pytest.mark.parametrize("row", NEUTRON_TYPES, ids=lambda r: r.code)
def test_every_neutron_row_is_a_neutron_exception_and_is_classified_by_its_type(
    row: ErrorRow,
) -> None:
    pattern = re.compile(rf"^class {row.code}\(", re.MULTILINE)
    sources = [
        *(DIST / "neutron_lib" / "exceptions").glob("*.py"),
        *(DIST / "neutron").rglob("*exceptions.py"),
    ]
    assert any(pattern.search(p.read_text()) for p in sources), row.code
    failure = classify(neutron_answer(409, row.code, "whatever the text says: Quota exceeded"))
    assert (failure.kind, failure.code) == (row.kind, row.code)
    assert row.why and "\n" not in row.why


def test_network_exhaustion_is_never_other_or_invalid() -> None:
    exhausted = {"OverQuota", "IpAddressGenerationFailure", "ExternalIpAddressExhausted"}
    kinds = {r.code: r.kind for r in NEUTRON_TYPES}
    assert {kinds[c] for c in exhausted} <= {ErrorKind.QUOTA, ErrorKind.CAPACITY}
    nova = {"NoMoreFixedIps", "PortLimitExceeded", "SecurityGroupLimitExceeded"}
    nova |= {"FloatingIpLimitExceeded", "NoMoreFloatingIps"}
    assert {r.kind for r in NOVA_EXCEPTIONS if r.exception in nova} <= {
        ErrorKind.QUOTA,
        ErrorKind.CAPACITY,
    }

"""The pure parts of OpenStack's all-or-nothing by multi-create: the request's name, finding
its unbound servers in Nova's order, and pairing them with nodes."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest

from clustermgr.core.errors import ErrorKind
from clustermgr.providers.base import TAG_CLUSTER, TAG_NODE, TAG_REQUEST, LaunchError
from clustermgr.providers.openstack.multicreate import (
    MultiCreate,
    pair,
    request_name,
    unbound,
)
from clustermgr.providers.openstack.tasks import Attempt, NodeTask

pytestmark = pytest.mark.unit


def server(name: str, request: str = "r-1", node: str | None = None, **extra: Any) -> Any:
    meta = {TAG_CLUSTER: "c", TAG_REQUEST: request, **({TAG_NODE: node} if node else {})}
    fields = {"id": f"id-{name}", "status": "BUILD", "task_state": None, **extra}
    return SimpleNamespace(name=name, metadata=meta, **fields)


def test_the_request_name_is_the_cluster_and_a_digest_the_same_on_every_retry() -> None:
    name = request_name("gpu", "r-0123456789abcdef")
    assert name == request_name("gpu", "r-0123456789abcdef")
    assert name.startswith("gpu-") and len(name) == len("gpu-") + 10
    assert name != request_name("gpu", "r-other")


def test_unbound_servers_come_in_novas_order_and_only_this_requests() -> None:
    base = request_name("c", "r-1")
    listed = [
        server(f"{base}-10"),
        server(f"{base}-2"),
        server(f"{base}-1"),
        server(f"{base}-3", node="n-3"),  # bound already
        server(f"{base}-4", request="r-2"),  # another request's
        server(f"{base}x-5"),  # not this name
        server("c-n-1"),
    ]
    assert [s.name for s in unbound(listed, "c", "r-1")] == [f"{base}-1", f"{base}-2", f"{base}-10"]
    assert [s.name for s in unbound([server(base)], "c", "r-1")] == [base]  # a request for one


def test_pairing_skips_failed_and_deleting_servers_and_returns_the_rest() -> None:
    tasks = [NodeTask(f"n-{i}", f"c-n-{i}", deque()) for i in (1, 2)]
    failed = server("a", status="ERROR")
    deleting = server("b", task_state="deleting")
    first, second, third = server("c"), server("d", status="ACTIVE"), server("e")
    kept, rest = pair(tasks, [failed, first, deleting, second, third])
    assert kept == [first, second]
    assert rest == [failed, deleting, third]


def test_one_attempts_errors_become_one_error_for_the_whole_request() -> None:
    tasks = [NodeTask(f"n-{i}", f"c-n-{i}", deque()) for i in (1, 2, 3)]
    earlier = LaunchError(ErrorKind.CAPACITY, "ServerFault500", "before", "f0", None, 3)
    tasks[0].errors.append(earlier)
    marks = [len(t.errors) for t in tasks]
    for task in tasks:
        task.errors.append(LaunchError(ErrorKind.CAPACITY, "ServerFault500", "No valid host"))
    launcher = SimpleNamespace(nova=SimpleNamespace(cluster="c"), request_id="r-1")
    MultiCreate(launcher).collapse(tasks, marks, Attempt("f1", "11", "az-1"))  # type: ignore[arg-type]
    assert [t.errors for t in tasks[1:]] == [[], []]
    assert tasks[0].errors == [
        earlier,
        LaunchError(ErrorKind.CAPACITY, "ServerFault500", "No valid host", "f1", "az-1", 3),
    ]

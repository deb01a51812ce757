"""The shared provider skeleton, driven by the smallest provider one can write on it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import (
    CloudInstance,
    InstanceState,
    InstanceType,
    LaunchResult,
    LaunchSpec,
    Provider,
)
from clustermgr.providers.skeleton import Check, CloudProvider, Failure, Sdk, TtlCache


class BoardError(Exception):
    """What a (made-up) power-controller SDK raises: a code and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


KINDS = {"NoPower": ErrorKind.CAPACITY, "BadLogin": ErrorKind.AUTH, "Busy": ErrorKind.TRANSIENT}


def classify(exc: BaseException) -> Failure:
    code = exc.code if isinstance(exc, BoardError) else type(exc).__name__
    return Failure(KINDS.get(code, ErrorKind.OTHER), code, str(exc))


@dataclass(frozen=True)
class BoardPlan:
    nodes: tuple[str, ...]


@dataclass
class Board:
    """The "cloud": which nodes it powers, and what its next reads / power-ons fail with."""

    powered: dict[str, str] = field(default_factory=dict)
    fail_read: list[Exception] = field(default_factory=list)
    fail: list[BoardError] = field(default_factory=list)
    catalog_reads: int = 0

    def read(self) -> None:
        if self.fail_read:
            raise self.fail_read.pop(0)

    def power_on(self) -> None:
        if self.fail:
            raise self.fail.pop(0)


class BoardProvider(CloudProvider[BoardPlan]):
    """Everything here is what a new provider has to write; the rest is the skeleton's."""

    kind = "board"
    sdk = Sdk((BoardError,), classify)

    def __init__(self, settings: ProviderSettings, cluster: str, board: Board) -> None:
        super().__init__(settings, cluster)
        self.board = board

    def credential_source(self) -> str:
        return "password file /etc/board.pw"

    def prepare(self, spec: LaunchSpec, count: int, request_id: str) -> BoardPlan | None:
        self.need_names(spec, count)
        if spec.instance_types != ("bmc.node",):
            raise self.bad(spec, "instance_types", ",".join(spec.instance_types), "unknown")
        self.call("reading the board", self.board.read)
        nodes = spec.node_names[:count]
        return BoardPlan(nodes) if nodes else None

    def start(self, plan: BoardPlan, result: LaunchResult) -> None:
        for node in plan.nodes:
            try:
                self.board.power_on()
            except BoardError as exc:
                result.errors.append(self.failure(exc).launch_error("bmc.node", count=1))
                continue
            self.board.powered[node] = result.request_id
            result.instances.append(self._instance(node))

    def read_catalog(self) -> list[InstanceType]:
        self.board.catalog_reads += 1
        return [InstanceType("bmc.node", vcpus=64, memory_mb=262144)]

    def check_credentials(self) -> str:
        self.board.read()
        return "logged in"

    def checks(self) -> list[Check]:
        return [("catalog", self.check_catalog)]

    def list_instances(self) -> dict[str, CloudInstance]:
        return {n: self._instance(n) for n in self.board.powered}

    def remove(self, instance_ids: list[str], request_id: str) -> None:
        for node in instance_ids:
            self.board.powered.pop(node, None)

    def _instance(self, node: str) -> CloudInstance:
        return CloudInstance(
            node, node, InstanceState.RUNNING, None, "bmc.node", None, "on-demand", None
        )


def provider(board: Board) -> BoardProvider:
    # config.ProviderSettings.type only admits the built-in kinds; the class is what matters here
    settings = ProviderSettings(name="bmc", type="local", region="rack1")
    return BoardProvider(settings, "c1", board)


def spec(nodes: list[str], types: tuple[str, ...] = ("bmc.node",)) -> LaunchSpec:
    return LaunchSpec("t", types, "img", node_names=tuple(nodes))


def test_a_provider_on_the_skeleton_is_a_provider() -> None:
    assert isinstance(provider(Board()), Provider)


def test_launch_merges_errors_per_kind_code_type_zone() -> None:
    board = Board(fail=[BoardError("NoPower", "no power"), BoardError("NoPower", "none")])
    result = provider(board).launch(spec(["n1", "n2", "n3"]), 3, "r1")
    assert [i.instance_id for i in result.instances] == ["n3"]
    assert [(e.kind, e.code, e.count, e.message) for e in result.errors] == [
        (ErrorKind.CAPACITY, "NoPower", 2, "no power")
    ]


def test_invalid_and_auth_raise_other_failures_before_launch_are_returned() -> None:
    with pytest.raises(ProviderError) as caught:
        provider(Board()).launch(spec(["n1"], ("gpu.huge",)), 1, "r1")
    assert caught.value.kind is ErrorKind.INVALID and "instance_types" in str(caught.value)
    with pytest.raises(ProviderError) as caught:
        provider(Board(fail_read=[BoardError("BadLogin", "denied")])).launch(spec(["n1"]), 1, "r1")
    assert caught.value.kind is ErrorKind.AUTH
    assert "credentials rejected (password file /etc/board.pw): denied" in str(caught.value)
    result = provider(Board(fail_read=[BoardError("Busy", "later")])).launch(spec(["n1"]), 1, "r1")
    assert result.instances == [] and [(e.kind, e.count) for e in result.errors] == [
        (ErrorKind.TRANSIENT, 1)
    ]


def test_check_stops_after_failing_credentials_and_never_raises() -> None:
    failing = provider(Board(fail_read=[BoardError("BadLogin", "denied")])).check()
    assert [(c.name, c.ok) for c in failing] == [("credentials", False)]
    assert "password file" in failing[0].detail
    assert [(c.name, c.ok) for c in provider(Board()).check()] == [
        ("credentials", True),
        ("catalog", True),
    ]
    odd = provider(Board(fail_read=[ValueError("x")]))
    assert [(c.ok, c.detail) for c in odd.check()] == [(False, "credentials failed: ValueError")]


def test_catalog_is_cached_and_terminate_deduplicates() -> None:
    board = Board()
    prov = provider(board)
    assert prov.catalog() == prov.catalog() and board.catalog_reads == 1
    prov.launch(spec(["n1", "n2"]), 2, "r1")
    prov.terminate(["n1", "n1", "gone"], "r2")
    prov.terminate([], "r3")
    assert list(prov.list_instances()) == ["n2"]


def test_ttl_cache_reads_again_after_the_ttl_or_a_clear() -> None:
    cache: TtlCache[int] = TtlCache(ttl_s=0.0)
    reads = iter(range(10))
    assert [cache.get(lambda: next(reads)) for _ in range(2)] == [0, 1]
    cache = TtlCache()
    assert [cache.get(lambda: next(reads)) for _ in range(2)] == [2, 2]
    cache.clear()
    assert cache.get(lambda: next(reads)) == 3


def test_an_all_or_nothing_launch_that_comes_back_short_is_released_whole() -> None:
    from dataclasses import replace

    board = Board(fail=[BoardError("NoPower", "no power")])
    prov = provider(board)
    whole = replace(spec(["n1", "n2", "n3"]), all_or_nothing=True)
    result = prov.launch(whole, 3, "r1")
    assert result.instances == [] and board.powered == {}  # n2, n3 started, then released
    first = result.errors[0]
    assert (first.kind, first.code) == (ErrorKind.CAPACITY, "AllOrNothing")
    assert first.message == "all-or-nothing: got 2 of 3, released"


def test_what_cannot_be_released_stays_in_the_result_and_says_so() -> None:
    """A cloud that accepts the terminate but keeps the instances: they are looked up again,
    released once more, and then returned (the engine fails the whole order, which
    terminates them and keeps the rows FAILED until the cloud accepted)."""
    from dataclasses import replace

    class Sticky(BoardProvider):
        def remove(self, instance_ids: list[str], request_id: str) -> None:
            self.board.catalog_reads += 1  # counts the tries; the board keeps them powered

    board = Board(fail=[BoardError("NoPower", "no power")])
    prov = Sticky(ProviderSettings(name="bmc", type="local", region="rack1"), "c1", board)
    result = prov.launch(replace(spec(["n1", "n2"]), all_or_nothing=True), 2, "r1")
    assert [i.instance_id for i in result.instances] == ["n2"] and board.catalog_reads == 2
    assert result.errors[0].message == (
        "all-or-nothing: got 1 of 2, release failed: the engine terminates them"
    )

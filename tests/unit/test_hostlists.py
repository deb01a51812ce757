from __future__ import annotations

import pytest

from clustermgr.core.hostlists import HostlistError, compress, expand


def test_expand_keeps_padding_and_order() -> None:
    assert expand("gpu-[001-003,007]") == ["gpu-001", "gpu-002", "gpu-003", "gpu-007"]
    assert expand("a[1-2],b5") == ["a1", "a2", "b5"]
    assert expand("") == []


def test_compress_is_the_inverse() -> None:
    names = ["gpu-007", "gpu-001", "gpu-002", "gpu-003", "gpu-002"]
    assert compress(names) == "gpu-[001-003,007]"
    names = expand("n[1-10],m[01-05]")
    assert sorted(expand(compress(names))) == sorted(names)


def test_bad_expressions_raise() -> None:
    for bad in ("gpu-[3-1]", "gpu-[1-", "gpu-[a-c]"):
        with pytest.raises(HostlistError):
            expand(bad)

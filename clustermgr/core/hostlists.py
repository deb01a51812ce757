"""Slurm hostlists (`gpu-[001-003,007]`): a typed face on the python-hostlist library."""

from __future__ import annotations

from collections.abc import Iterable

import hostlist as _hostlist


class HostlistError(ValueError):
    """A hostlist expression that cannot be expanded."""


MAX_HOSTS = 1_000_000


def expand(expression: str) -> list[str]:
    """`gpu-[001-003,007]` -> ['gpu-001', 'gpu-002', 'gpu-003', 'gpu-007'] (order kept)."""
    text = expression.strip()
    if not text:
        return []
    try:
        names: list[str] = _hostlist.expand_hostlist(text, allow_duplicates=False)
    except _hostlist.BadHostlist as exc:
        raise HostlistError(str(exc)) from None
    if len(names) > MAX_HOSTS:
        raise HostlistError(f"expands to {len(names)} names, more than {MAX_HOSTS}")
    return names


def compress(names: Iterable[str]) -> str:
    """['gpu-001', 'gpu-002', 'gpu-007'] -> 'gpu-[001-002,007]' (sorted, deduplicated)."""
    unique = sorted(set(names))
    if not unique:
        return ""
    compressed: str = _hostlist.collect_hostlist(unique)
    return compressed

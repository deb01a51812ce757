"""Find policies: a `clustermgr.policies` entry point (the built-ins are registered there
too, in pyproject.toml, the way an outside package registers its own), or a file path."""

from __future__ import annotations

import importlib.util
import inspect
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from clustermgr.config import PolicyRef
from clustermgr.core.errors import ConfigError
from clustermgr.policy.base import Policy


def policy_class(ref: PolicyRef) -> type[Any]:
    if ref.path is not None:
        return _from_file(ref.name, ref.path)
    entries = entry_points(group="clustermgr.policies")
    for entry in entries:
        if entry.name == ref.name:
            loaded: type[Any] = entry.load()
            return loaded
    known = ", ".join(sorted(set(entries.names)))
    raise ConfigError(
        f"policy {ref.name!r}: not built in or installed (known, the `clustermgr.policies` "
        f"entry points: {known}); give `path` to load a file"
    )


def _from_file(name: str, path: Path) -> type[Any]:
    spec = importlib.util.spec_from_file_location(f"clustermgr_policy_{name}", path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"policy {name!r}: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except FileNotFoundError:
        raise ConfigError(f"policy {name!r}: no such file {path}") from None
    except SyntaxError as exc:
        raise ConfigError(
            f"policy {name!r}: {path}:{exc.lineno}: invalid Python: {exc.msg}"
        ) from None
    except SystemExit as exc:  # foreign code: it must not end the caller
        raise ConfigError(
            f"policy {name!r}: {path} called sys.exit({exc.code!r}) while loading"
        ) from None
    except Exception as exc:
        raise ConfigError(
            f"policy {name!r}: {path} failed to load: {type(exc).__name__}: {exc}"
        ) from None
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if getattr(obj, "name", None) == name and callable(getattr(obj, "decide", None)):
            found: type[Any] = obj
            return found
    raise ConfigError(f"policy {name!r}: {path} has no class with name = {name!r} and decide()")


def load_policy(ref: PolicyRef) -> Policy:
    cls = policy_class(ref)
    _check_option_names(ref, cls)
    try:
        policy = cls(**ref.options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"policy {ref.name!r}: bad options {ref.options}: {exc}") from None
    if not isinstance(policy, Policy):
        raise ConfigError(f"policy {ref.name!r}: {cls.__name__} has no decide(view) method")
    return policy


def _check_option_names(ref: PolicyRef, cls: type[Any]) -> None:
    """An option the policy does not take, or one it needs and was not given, named with
    the options it does take (rather than Python's `__init__() got an unexpected ...`)."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # no introspectable signature: the call says
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = [p.name for p in params if p.kind in named]
    offered = ", ".join(takes) if takes else "none"
    unknown = sorted(set(ref.options) - set(takes))
    if unknown:
        raise ConfigError(
            f"policy {ref.name!r}: unknown option(s) {', '.join(unknown)}; its options: {offered}"
        )
    missing = [
        p.name
        for p in params
        if p.kind in named and p.default is inspect.Parameter.empty and p.name not in ref.options
    ]
    if missing:
        raise ConfigError(
            f"policy {ref.name!r}: missing option(s) {', '.join(missing)}; its options: {offered}"
        )


def load_chain(refs: list[PolicyRef]) -> list[Policy]:
    return [load_policy(ref) for ref in refs]

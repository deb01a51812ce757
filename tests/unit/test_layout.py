"""The package layout docs/architecture.md describes: capabilities in their own folders,
small modules, and no two modules with one name meaning different things."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "clustermgr"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

# names that mean the same role in every package that has one: a provider package's split
# (client, errors, kind, provider, shapes), a package's base types, the state machine of
# what the package holds (nodes, directors), the package's side of the directors (its
# configuration, the scaling gate, staging's lookup, the local provider's lab director),
# the record of what cm-scale owns (db: the proof; scaling: the judgment built on it)
SHARED_ROLES = {"__init__", "base", "client", "errors", "kind", "provider", "shapes"}
SHARED_ROLES |= {"states", "director", "directors", "ownership"}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if ".venv" not in p.parts)


def test_no_two_modules_share_a_name_outside_the_shared_roles() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in modules():
        by_name[path.stem].append(str(path.relative_to(PACKAGE)))
    clashes = {
        name: paths
        for name, paths in by_name.items()
        if len(paths) > 1 and name not in SHARED_ROLES
    }
    assert clashes == {}


def test_no_loose_modules_at_the_top_of_the_package() -> None:
    loose = {p.name for p in PACKAGE.glob("*.py")}
    assert loose == {"__init__.py", "__main__.py"}


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 650, "split it by what it owns"


def test_the_module_map_names_every_package() -> None:
    text = ARCHITECTURE.read_text()
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    missing = [name for name in packages if f"| `{name}/` |" not in text]
    assert missing == []

"""docs/reliability.md's fault matrix lists every code of the providers' tables with its kind:
each block between `<!-- codes:NAME -->` and `<!-- /codes:NAME -->` is exactly what
`render(NAME)` makes of the table. After changing a table:
`python -m tests.unit.test_fault_matrix_doc --write` rewrites the blocks."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from clustermgr.providers.aws.ec2_codes import BOTOCORE_EXCEPTIONS, EC2_CODES
from clustermgr.providers.azure.errors import ERROR_KINDS as AZURE_KINDS
from clustermgr.providers.openstack.errors import ERROR_KINDS as OPENSTACK_KINDS
from clustermgr.providers.openstack.nova_neutron_codes import NEUTRON_TYPES, NOVA_EXCEPTIONS

pytestmark = pytest.mark.unit

RELIABILITY = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _aws() -> list[str]:
    lines = ["| EC2 code | kind | why |", "|---|---|---|"]
    lines += [f"| `{r.code}` | {r.kind.value} | {_cell(r.why)} |" for r in EC2_CODES]
    lines += [
        f"| `{r.code}` (botocore, no answer) | {r.kind.value} | {_cell(r.why)} |"
        for r in BOTOCORE_EXCEPTIONS
    ]
    return lines


def _azure() -> list[str]:
    lines = ["| ARM code or HTTP status | kind |", "|---|---|"]
    lines += [f"| `{key}` | {kind.value} |" for key, kind in AZURE_KINDS.items()]
    return lines


def _nova() -> list[str]:
    lines = ["| Nova exception | status / fault code | kind | why |", "|---|---|---|---|"]
    lines += [
        f"| `{r.exception}` | {r.status} | {r.kind.value} | {_cell(r.why)} |"
        for r in NOVA_EXCEPTIONS
    ]
    return lines


def _neutron() -> list[str]:
    lines = ["| Neutron `type` | kind | why |", "|---|---|---|"]
    lines += [f"| `{r.code}` | {r.kind.value} | {_cell(r.why)} |" for r in NEUTRON_TYPES]
    return lines


def _openstack() -> list[str]:
    lines = ["| answer (no row above) | kind |", "|---|---|"]
    for key, kind in OPENSTACK_KINDS.items():
        shown = f"{key[0]} {key[1]}" if isinstance(key, tuple) else str(key)
        lines.append(f"| `{shown}` | {kind.value} |")
    return lines


RENDERERS: dict[str, Callable[[], list[str]]] = {
    "aws": _aws,
    "azure": _azure,
    "nova": _nova,
    "neutron": _neutron,
    "openstack": _openstack,
}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- codes:{name} -->\n)(.*?)(<!-- /codes:{name} -->)", re.DOTALL)


def render(name: str) -> str:
    return "\n".join(RENDERERS[name]()) + "\n"


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_the_doc_lists_every_code_of_the_table_with_its_kind(name: str) -> None:
    found = _block(name).search(RELIABILITY.read_text())
    assert found is not None, f"docs/reliability.md has no <!-- codes:{name} --> block"
    assert found.group(2) == render(name), "run: python -m tests.unit.test_fault_matrix_doc --write"


def write() -> None:
    text = RELIABILITY.read_text()
    for name in RENDERERS:
        text = _block(name).sub(lambda m, n=name: m.group(1) + render(n) + m.group(3), text)
    RELIABILITY.write_text(text)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    write()

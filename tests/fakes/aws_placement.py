"""Placement groups for FakeAws (moto 5 has none), in EC2's query-API shapes (API
reference: CreatePlacementGroup, DescribePlacementGroups, DeletePlacementGroup; the
response element names are botocore's ec2 service model's locationNames: `placementGroup`,
`placementGroupSet`, `groupName`, `groupId`, `state`, `strategy`, `tagSet`).

- CreatePlacementGroup with a name that exists: 400 `InvalidPlacementGroup.Duplicate`
  ("The placement group 'NAME' already exists.");
- DeletePlacementGroup of a group a live instance is in: 400 `InvalidPlacementGroup.InUse`
  ("The placement group 'NAME' is in use and may not be deleted.", as terraform and boto
  users quote it); of an unknown group: 400 `InvalidPlacementGroup.Unknown`;
- a launch naming a group (CreateFleet `LaunchTemplateConfigs.N.Overrides.M.Placement.
  GroupName`, RunInstances `Placement.GroupName`) that does not exist: 400
  `InvalidPlacementGroup.Unknown`. Otherwise the instances it started are the group's
  members (moto is not told: it knows no groups).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

GROUP_PARAM = re.compile(r"^(LaunchTemplateConfigs\.\d+\.Overrides\.\d+\.)?Placement\.GroupName$")
_TAG = re.compile(r"^TagSpecification\.\d+\.Tag\.(\d+)\.(Key|Value)$")
_FILTER = re.compile(r"^Filter\.(\d+)\.(Name|Value\.\d+)$")
_INSTANCE_ID = re.compile(rb"(?<![0-9A-Za-z-])i-[0-9a-f]{17}")  # not the tail of an eni-


@dataclass
class FakeGroup:
    name: str
    group_id: str
    strategy: str
    tags: dict[str, str]
    members: set[str] = field(default_factory=set)


class PlacementGroups:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: dict[str, FakeGroup] = {}

    def reset(self) -> None:
        with self.lock:
            self.groups.clear()

    def create(self, params: list[tuple[str, str]]) -> tuple[int, str, str]:
        """(status, error code or '', the answer's inner XML or the error message)."""
        values = dict(params)
        name = values.get("GroupName", "")
        tags: dict[int, dict[str, str]] = {}
        for key, value in params:
            found = _TAG.match(key)
            if found:
                tags.setdefault(int(found.group(1)), {})[found.group(2)] = value
        with self.lock:
            if name in self.groups:
                message = f"The placement group '{name}' already exists."
                return 400, "InvalidPlacementGroup.Duplicate", message
            group = FakeGroup(
                name,
                f"pg-{uuid.uuid4().hex[:17]}",
                values.get("Strategy", "cluster"),
                {t["Key"]: t.get("Value", "") for t in tags.values() if "Key" in t},
            )
            self.groups[name] = group
        return 200, "", f"<placementGroup>{_item(group)}</placementGroup>"

    def describe(self, params: list[tuple[str, str]]) -> str:
        filters: dict[str, dict[str, list[str]]] = {}
        for key, value in params:
            found = _FILTER.match(key)
            if found:
                entry = filters.setdefault(found.group(1), {"name": [], "values": []})
                entry["name" if found.group(2) == "Name" else "values"].append(value)
        with self.lock:
            groups = list(self.groups.values())
        for entry in filters.values():
            key = entry["name"][0] if entry["name"] else ""
            if key.startswith("tag:"):
                tag = key.removeprefix("tag:")
                groups = [g for g in groups if g.tags.get(tag) in entry["values"]]
        items = "".join(f"<item>{_item(g)}</item>" for g in groups)
        return f"<placementGroupSet>{items}</placementGroupSet>"

    def delete(self, name: str, live: Callable[[str], bool]) -> tuple[int, str, str]:
        with self.lock:
            group = self.groups.get(name)
            if group is None:
                return (
                    400,
                    "InvalidPlacementGroup.Unknown",
                    f"The placement group '{name}' is unknown.",
                )
            if any(live(iid) for iid in group.members):
                message = f"The placement group '{name}' is in use and may not be deleted."
                return 400, "InvalidPlacementGroup.InUse", message
            del self.groups[name]
        return 200, "", "<return>true</return>"

    def take(self, params: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], str | None]:
        """The launch's parameters without the group (moto knows none), and the group."""
        names = {v for k, v in params if GROUP_PARAM.match(k)}
        kept = [(k, v) for k, v in params if not GROUP_PARAM.match(k)]
        return kept, next(iter(names), None)

    def known(self, name: str) -> bool:
        with self.lock:
            return name in self.groups

    def seat(self, name: str, body: bytes) -> None:
        """The instances a launch answer names join the group."""
        ids = {m.decode() for m in _INSTANCE_ID.findall(body)}
        with self.lock:
            if name in self.groups:
                self.groups[name].members |= ids

    def members(self, name: str) -> set[str]:
        with self.lock:
            group = self.groups.get(name)
            return set(group.members) if group else set()

    def names(self) -> list[str]:
        with self.lock:
            return sorted(self.groups)


def _item(group: FakeGroup) -> str:
    tags = "".join(
        f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>"
        for k, v in group.tags.items()
    )
    return (
        f"<groupName>{escape(group.name)}</groupName><groupId>{group.group_id}</groupId>"
        f"<state>available</state><strategy>{escape(group.strategy)}</strategy>"
        f"<tagSet>{tags}</tagSet>"
    )

"""Server groups on OpenStack: the per-launch group of a template's `placement = "per-launch"`
(policy `placement_policy`: affinity, the default, or soft-affinity) and a template's static
`placement_group` (a server group's name or id), each given to Nova as the scheduler hint
`group` on every server of the launch.

The shapes (openstacksdk's ServerGroup, Nova's os-server-groups API from microversion 2.64):
`create_server_group(name=, policy=)`, `server_groups()`, `find_server_group(name_or_id)`,
`delete_server_group(id, ignore_missing=True)`; `create_server(scheduler_hints={"group":
ID})` sends it beside `server` (as `OS-SCH-HNT:scheduler_hints`, which Nova takes as it
takes `os:scheduler_hints`). A server group takes no metadata, so the name carries the
cluster, template and request id (providers/launch_groups.py); names need not be unique,
so a retried launch looks its group up by name before making one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import LaunchSpec
from clustermgr.providers.launch_groups import (
    PlacementGroup,
    group_name,
    request_of_name,
    wants_group,
)

T = TypeVar("T")


class Nova(Protocol):
    cluster: str

    def service(self, name: str) -> Any: ...

    def call(self, what: str, fn: Callable[[], T], operation: str = "") -> T: ...

    def bad(self, spec: LaunchSpec, field_name: str, value: str, why: str) -> ProviderError: ...


def launch_group(nova: Nova, spec: LaunchSpec, count: int, request_id: str) -> str | None:
    """The id of the server group this launch's servers go into: its own (made now, or found
    again on a retry), the template's static one, or None."""
    if spec.placement_group and spec.launch_group is None:
        return static_group(nova, spec)
    if not wants_group(spec, count) or spec.launch_group is None:
        return None
    compute = nova.service("compute")
    name = group_name(nova.cluster, spec.template, request_id)
    policy = spec.launch_group

    def ensure() -> Any:
        for group in compute.server_groups():
            if group.name == name:
                return group
        return compute.create_server_group(name=name, policy=policy)

    made: Any = nova.call(f"making server group {name}", ensure)
    return str(made.id)


def static_group(nova: Nova, spec: LaunchSpec) -> str:
    """The id of the template's placement_group (INVALID when Nova knows no such group)."""
    compute = nova.service("compute")
    ref = spec.placement_group or ""
    try:
        found = nova.call(
            f"looking up server group {ref}",
            lambda: compute.find_server_group(ref, ignore_missing=False),
        )
    except ProviderError as exc:
        if exc.kind in (ErrorKind.AUTH, ErrorKind.THROTTLED, ErrorKind.TRANSIENT):
            raise
        raise nova.bad(spec, "placement_group", ref, "no such server group") from None
    return str(found.id)


def listed(nova: Nova) -> list[PlacementGroup]:
    compute = nova.service("compute")
    groups = nova.call("listing server groups", lambda: list(compute.server_groups()))
    found = []
    for group in groups:
        name = str(group.name or "")
        request = request_of_name(name)
        if request:
            members = len(getattr(group, "member_ids", None) or [])
            found.append(PlacementGroup(name, str(group.id), request, members=members))
    return found


def delete(nova: Nova, group: PlacementGroup) -> bool:
    compute = nova.service("compute")
    nova.call(
        f"deleting server group {group.name}",
        lambda: compute.delete_server_group(group.group_id, ignore_missing=True),
    )
    return True

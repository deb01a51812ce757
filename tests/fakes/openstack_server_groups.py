"""Nova server groups for FakeOpenStack, as Debian 12's nova (Zed) answers them
(nova/api/openstack/compute/server_groups.py and its schemas, microversion 2.64 and later):

- `POST /os-server-groups` `{"server_group": {"name", "policy", "rules"}}`, policy one of
  affinity, anti-affinity, soft-affinity, soft-anti-affinity -> 200 `{"server_group": {id,
  name, policy, rules, members, project_id, user_id}}` (names need not be unique);
- `GET /os-server-groups` -> `{"server_groups": [...]}` (the project's); `GET` and
  `DELETE /os-server-groups/{id}` (204), 404 "Instance group ID could not be found."
  (nova/exception.py InstanceGroupNotFound);
- a server created with `os:scheduler_hints: {"group": ID}` (beside `server` in the body;
  nova's servers schema takes `OS-SCH-HNT:scheduler_hints` too, the key openstacksdk's
  Server sends) becomes a member; a group that does not exist is a 400 on the create
  (servers.py turns InstanceGroupNotFound into HTTPBadRequest); a deleted server leaves its
  groups.
"""

from __future__ import annotations

import uuid
from typing import Any

JSON = dict[str, Any]
POLICIES = frozenset({"affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"})


class BadRequest(Exception):
    """A 400 with Nova's message."""


class NotFound(Exception):
    """A 404 with Nova's message."""


class ServerGroups:
    def __init__(self, project_id: str, user_id: str) -> None:
        self.project_id, self.user_id = project_id, user_id
        self.groups: dict[str, JSON] = {}

    def create(self, body: JSON) -> JSON:
        spec = body.get("server_group")
        if not isinstance(spec, dict) or not spec.get("name"):
            raise BadRequest("Invalid input for field/attribute server_group.")
        policy = spec.get("policy")
        if policy not in POLICIES:
            raise BadRequest(f"Invalid input for field/attribute policy. Value: {policy}.")
        group = {
            "id": str(uuid.uuid4()),
            "name": str(spec["name"]),
            "policy": policy,
            "rules": dict(spec.get("rules") or {}),
            "members": [],
            "project_id": self.project_id,
            "user_id": self.user_id,
        }
        self.groups[group["id"]] = group
        return {"server_group": dict(group)}

    def listed(self) -> JSON:
        return {"server_groups": [dict(g) for g in self.groups.values()]}

    def one(self, group_id: str) -> JSON:
        return {"server_group": dict(self._group(group_id))}

    def delete(self, group_id: str) -> None:
        self._group(group_id)
        del self.groups[group_id]

    def join(self, hints: Any, server_id: str) -> None:
        """The group a create's scheduler hints name takes the server (400 when unknown)."""
        wanted = hints.get("group") if isinstance(hints, dict) else None
        if wanted is None:
            return
        group = self.groups.get(str(wanted))
        if group is None:
            raise BadRequest(f"Instance group {wanted} could not be found.")
        group["members"] = [*group["members"], server_id]

    def leave(self, server_id: str) -> None:
        for group in self.groups.values():
            group["members"] = [m for m in group["members"] if m != server_id]

    def _group(self, group_id: str) -> JSON:
        group = self.groups.get(group_id)
        if group is None:
            raise NotFound(f"Instance group {group_id} could not be found.")
        return group

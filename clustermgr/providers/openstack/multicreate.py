"""All or nothing on OpenStack by Nova's multi-create: one attempt (flavor x zone) is ONE
`POST /servers` with `min_count = max_count = <nodes>`.

Nova schedules such a request whole: when its hosts cannot take every server, the scheduler
says NoValidHost for all of them (nova/scheduler/manager.py `_ensure_sufficient_hosts`) and
each one ends in ERROR with that fault; the quota check refuses the whole create (403) when
not even min_count fit. The request is named `<cluster>-<digest of the request id>`, and Nova
names its servers `<that>-1` .. `<that>-<n>` (nova/compute/api.py `_populate_instance_names`);
they carry our tags and the request id, no node yet. Found again by that name and request id
(openstacksdk's create drops Nova's `return_reservation_id`, and the reservation id shows
only to admins), each is bound to a node at once: renamed `<cluster>-<node>` (Nova renames a
server in any state). Its node tag is set when it is ACTIVE: Nova refuses metadata changes
while a server builds (409), so the node's boot script waits for the tag (a server still
building when the launch stops waiting cannot be tagged: it is deleted). A short attempt
(an ERROR, fewer servers than wanted) is deleted whole by the Launcher's rounds and the next
flavor x zone gets the whole job.

Not for fabric "sriov": each server needs its own pre-made port, which one request for n
servers cannot name (Nova: "Unable to launch multiple instances with a single configured
port ID"); those launches keep the Launcher's rounds of one create per node.

A retry of the same request (the daemon died mid-launch) adopts the unbound servers it finds
(renamed to the nodes still without one) and deletes the rest and the failed ones.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import TAG_NODE, TAG_REQUEST, LaunchError
from clustermgr.providers.openstack.tasks import Attempt, NodeTask, Rounds

log = logging.getLogger(__name__)

NOT_CREATED = "NotCreated"  # the code when Nova made fewer servers than asked


def request_name(cluster: str, request_id: str) -> str:
    """The name of one launch's multi-create (the same on every retry of the request)."""
    digest = hashlib.sha256(request_id.encode()).hexdigest()[:10]
    return f"{cluster}-{digest}"


def unbound(servers: Iterable[Any], cluster: str, request_id: str) -> list[Any]:
    """This request's multi-create servers that no node has yet, in Nova's order."""
    base = request_name(cluster, request_id)
    pattern = re.compile(re.escape(base) + r"(?:-(\d+))?")
    found: list[tuple[int, Any]] = []
    for server in servers:
        meta = server.metadata or {}
        named = pattern.fullmatch(str(server.name))
        if named and meta.get(TAG_REQUEST) == request_id and not meta.get(TAG_NODE):
            found.append((int(named.group(1) or 0), server))
    return [server for _, server in sorted(found, key=lambda pair: pair[0])]


def usable(server: Any) -> bool:
    """Neither failed nor being deleted."""
    failed = str(server.status).upper() == "ERROR"
    return not failed and getattr(server, "task_state", None) != "deleting"


def pair(tasks: Sequence[NodeTask], servers: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(servers for the tasks in order, the servers left over or unusable)."""
    good = [s for s in servers if usable(s)]
    kept = good[: len(tasks)]
    return kept, [s for s in servers if s not in kept]


class MultiCreate:
    """The create step of the Launcher's all-or-nothing rounds, by multi-create."""

    def __init__(self, launcher: Rounds) -> None:
        self.launcher = launcher
        self.nova = launcher.nova
        self.request_id = launcher.request_id
        self.name = request_name(self.nova.cluster, self.request_id)
        self.gone: set[str] = set()  # servers of earlier attempts, deleted or being deleted

    def found(self) -> list[Any]:
        listed = self.nova.our_servers()
        mine = unbound(listed, self.nova.cluster, self.request_id)
        return [s for s in mine if str(s.id) not in self.gone]

    def adopt(self, tasks: Sequence[NodeTask]) -> None:
        """Bind what an earlier try of this request made to the nodes still without a
        server; delete the rest."""
        free = [t for t in tasks if t.server_id is None and t.instance is None and not t.done]
        kept, extra = pair(free, self.found())
        for server in extra:
            log.info("request %s: deleting unbound server %s", self.request_id, server.id)
            self.drop(str(server.id))
        for task, server in zip(free, kept, strict=False):
            self.bind(task, server)
            self.launcher.reuse(task, server)

    def create(self, tasks: Sequence[NodeTask], attempt: Attempt) -> None:
        """One multi-create for the tasks without a server, each bound to one of them."""
        todo = [t for t in tasks if t.wants_server]
        for task in todo:
            task.current = task.attempts.popleft()
        halt = self.launcher.halt
        if halt is not None:
            for task in todo:
                task.fail(halt.kind, halt.code, halt.args[0])
            return
        if not todo:
            return
        attrs = self.launcher.base_attrs(attempt, self.name)
        attrs.update(min_count=len(todo), max_count=len(todo))
        where = " ".join(w for w in (attempt.flavor, attempt.zone) if w)
        what = f"creating {len(todo)} servers {self.name} ({where})"
        if self.launcher.create(what, lambda: attrs, todo) is None:
            return
        servers, extra = pair(todo, self.found())
        for server in extra:
            self.drop(str(server.id))
        self.nova.parallel(lambda ts: self.bind(*ts), list(zip(todo, servers, strict=False)))
        for task in todo[len(servers) :]:
            message = f"Nova made {len(servers)} of {len(todo)} servers {self.name}"
            task.fail(ErrorKind.CAPACITY, NOT_CREATED, message)

    def bind(self, task: NodeTask, server: Any) -> None:
        """The server is the task's: named for its node (the tag follows when ACTIVE)."""
        task.server_id, task.server = str(server.id), server
        self.gone.add(str(server.id))  # never found as unbound again, renamed or not
        self.rename(task, server)

    def rename(self, task: NodeTask, server: Any) -> None:
        if str(server.name) == task.name:
            return
        try:
            self.nova.rename_server(str(server.id), task.name)
        except ProviderError as exc:  # the name is cosmetic until the tag: go on
            if exc.kind is ErrorKind.AUTH:
                raise
            log.warning("could not rename server %s to %s: %s", server.id, task.name, exc)

    def tag(self, tasks: Sequence[NodeTask]) -> None:
        """When every server started: give each its node tag (and its name, if the rename
        was lost); one that cannot be tagged is deleted and failed, the round comes back
        short. (A short round is released untagged.)"""
        if any(t.instance is None for t in tasks):
            return
        done = [t for t in tasks if t.server is not None]
        self.nova.parallel(self.tag_one, done)

    def tag_one(self, task: NodeTask) -> None:
        server, instance = task.server, task.instance
        assert instance is not None
        self.rename(task, server)
        if instance.node_name != task.node:
            try:
                self.nova.set_metadata(str(server.id), {TAG_NODE: task.node})
            except ProviderError as exc:
                if exc.kind is ErrorKind.AUTH:
                    raise
                log.warning("server %s: no node tag, deleting it: %s", task.name, exc)
                self.drop(str(server.id))
                task.instance, task.server_id = None, None
                task.fail(exc.kind, exc.code, f"server {task.name}: {exc.args[0]}")
                return
        tags = {**instance.tags, TAG_NODE: task.node}
        task.instance = replace(instance, node_name=task.node, tags=tags)

    def collapse(self, tasks: Sequence[NodeTask], marks: Sequence[int], attempt: Attempt) -> None:
        """The errors of one attempt as one, for all its servers (as the one request failed:
        Nova's NoValidHost is the same for each), not one a node."""
        new = [e for t, n in zip(tasks, marks, strict=True) for e in t.errors[n:]]
        if not new:
            return
        for task, mark in zip(tasks, marks, strict=True):
            del task.errors[mark:]
        first = new[0]
        error = LaunchError(
            first.kind, first.code, first.message, attempt.flavor, attempt.zone, len(tasks)
        )
        tasks[0].errors.append(error)

    def drop(self, server_id: str) -> None:
        self.gone.add(server_id)
        self.launcher.discard(server_id)

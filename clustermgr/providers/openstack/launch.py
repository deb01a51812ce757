"""One OpenStack launch: validate, reuse earlier servers, create in rounds, wait for ACTIVE.

Each node gets one server named `<cluster>-<node>` whose metadata carries our tags, the node
name and the request id. A retry with the same request id finds that server by name and
metadata and reuses it. Each round creates one server per node that still needs one (the
next flavor x zone of the spec), then reads the servers until none is BUILDing. A server that
ends in ERROR is deleted; when its fault is a scheduling failure (CAPACITY, "No valid host")
the node tries its next flavor in the next round. QUOTA or THROTTLED (after backoff) on a
create stops the creations still to come in this launch: they would fail the same way.

All or nothing (`LaunchSpec.all_or_nothing`): every round gives every node a server of the
same flavor x zone; a round that does not bring them all ACTIVE is deleted at once (and
looked up again) and the next flavor or zone gets every node.

All or nothing without SR-IOV makes each round's servers with one multi-create
(multicreate.py); with fabric "sriov" every server needs its own pre-made port, so those
rounds create one server per node.

This module does not import the provider: it asks for what it needs as `Nova` (tasks.py;
provider.py implements it), so the provider imports the launch and not the other way round.
"""

from __future__ import annotations

import base64
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from clustermgr.core import progress_marks
from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import (
    TAG_NODE,
    TAG_REQUEST,
    LaunchResult,
    LaunchSpec,
    ours,
    short_whole,
)
from clustermgr.providers.openstack.errors import NOT_FOUND_CODES, fault_failure
from clustermgr.providers.openstack.multicreate import MultiCreate
from clustermgr.providers.openstack.shapes import instance_of, server_name
from clustermgr.providers.openstack.sriov import PORT_KEY, ensure_port
from clustermgr.providers.openstack.tasks import Attempt, NodeTask, Nova

log = logging.getLogger(__name__)

BUILDING = frozenset({"BUILD", "REBUILD"})


@dataclass(frozen=True)
class ServerPlan:
    """What validation found for one launch: the nodes, and ids for what the spec names."""

    spec: LaunchSpec
    request_id: str
    nodes: tuple[str, ...]
    attempts: tuple[Attempt, ...]
    image_id: str
    networks: list[dict[str, str]] | str
    key_name: str | None
    group_id: str | None = None  # the server group every server goes into (scheduler hint)


def plan_servers(nova: Nova, spec: LaunchSpec, count: int, request_id: str) -> ServerPlan:
    """Raise INVALID (naming template and field) for anything the cloud does not know."""
    nova.need_names(spec, count)
    if not spec.instance_types:
        raise nova.bad(spec, "instance_types", "", "at least one flavor is needed")
    check = Validation(nova, spec)
    flavors = check.flavor_ids(spec.instance_types)
    zones: tuple[str | None, ...] = tuple(spec.zones) or (None,)
    attempts = tuple(Attempt(f, flavors[f], z) for f in spec.instance_types for z in zones)
    nodes = spec.node_names[:count]
    return ServerPlan(
        spec, request_id, nodes, attempts, check.image_id(), check.networks(), check.key_name()
    )


class Validation:
    """Looks up what one spec names (flavors, image, network, key pair)."""

    def __init__(self, nova: Nova, spec: LaunchSpec) -> None:
        self.nova = nova
        self.spec = spec

    def bad(self, field_name: str, value: str, why: str) -> ProviderError:
        return self.nova.bad(self.spec, field_name, value, why)

    def flavor_ids(self, wanted: tuple[str, ...]) -> dict[str, str]:
        """Flavor name (or id) in the spec -> flavor id; refreshed once before giving up."""
        known = _by_name_and_id(self.nova.flavors())
        if any(w not in known for w in wanted):
            known = _by_name_and_id(self.nova.refresh_flavors())
        for itype in wanted:
            if itype not in known:
                raise self.bad("instance_types", itype, f"no such flavor in {self.nova.region}")
        return {w: known[w] for w in wanted}

    def image_id(self) -> str:
        image_api = self.nova.service("image")
        image = self.lookup(
            "image",
            self.spec.image,
            lambda: image_api.find_image(self.spec.image, ignore_missing=False),
        )
        status = str(getattr(image, "status", "active") or "active").lower()
        if status != "active":
            raise self.bad("image", self.spec.image, f"image status is {status}, not active")
        return str(image.id)

    def networks(self) -> list[dict[str, str]] | str:
        """Nova's `networks`: the named network, else "auto" (Nova picks or allocates one)."""
        network = self.spec.network
        if not network:
            return "auto"
        network_api = self.nova.service("network")
        found = self.lookup(
            "network", network, lambda: network_api.find_network(network, ignore_missing=False)
        )
        return [{"uuid": str(found.id)}]

    def key_name(self) -> str | None:
        key = self.spec.key_name
        if not key:
            return None
        compute = self.nova.service("compute")
        self.lookup("key_name", key, lambda: compute.find_keypair(key, ignore_missing=False))
        return key

    def lookup(self, field_name: str, value: str, fn: Callable[[], Any]) -> Any:
        """fn() finds what the spec names (find_* with ignore_missing=False); not found (404)
        or an ambiguous name (DuplicateResource) -> INVALID naming the field."""
        try:
            found = self.nova.call(f"looking up {field_name} {value}", fn)
        except ProviderError as exc:
            if exc.code in NOT_FOUND_CODES:
                raise self.bad(field_name, value, f"not found in {self.nova.region}") from None
            if exc.kind is ErrorKind.INVALID:
                raise self.bad(field_name, value, exc.args[0]) from None
            raise
        if found is None:
            raise self.bad(field_name, value, f"not found in {self.nova.region}")
        return found


class Launcher:
    """Creates the servers of one ServerPlan, in rounds, and waits for them."""

    def __init__(self, nova: Nova, plan: ServerPlan) -> None:
        self.nova = nova
        self.plan = plan
        self.spec = plan.spec
        self.request_id = plan.request_id
        self.halt: ProviderError | None = None  # QUOTA / THROTTLED: stop creating
        self.names: dict[str, str] = {}

    def run(self, result: LaunchResult) -> None:
        plan = self.plan
        cluster = self.nova.cluster
        tasks = [NodeTask(n, server_name(cluster, n), deque(plan.attempts)) for n in plan.nodes]
        self.names = self.nova.flavor_names()
        try:
            self.adopt(tasks)
            if self.spec.all_or_nothing:
                self.whole_rounds(tasks, result)
            while any(t.wants_server or t.waiting for t in tasks):
                self.create_round(tasks, plan)
                self.wait_round(tasks)
        except ProviderError as exc:
            if exc.kind is ErrorKind.AUTH:
                raise
            for task in tasks:
                if task.instance is None and not task.done:
                    task.fail(exc.kind, exc.code, exc.args[0])
        for task in tasks:
            if task.instance is not None:
                result.instances.append(task.instance)
            result.errors.extend(task.errors)

    def whole_rounds(self, tasks: list[NodeTask], result: LaunchResult) -> None:
        """One flavor x zone a round for every node (one multi-create, or one create per
        node for SR-IOV); a short round is released before the next (what cannot be
        released stays, as instances, for the engine to terminate)."""
        multi = MultiCreate(self) if self.spec.fabric != "sriov" else None
        if multi is not None:
            multi.adopt(tasks)
        for attempt in self.plan.attempts:
            if all(t.instance is not None for t in tasks):  # adopted: an earlier try made them
                break
            for task in tasks:
                if task.instance is None and task.server_id is None:
                    task.attempts, task.done = deque([attempt]), False
            if multi is not None:
                marks = [len(t.errors) for t in tasks]
                multi.create(tasks, attempt)
                self.wait_round(tasks)
                multi.tag(tasks)
                multi.collapse(tasks, marks, attempt)
            else:
                self.create_round(tasks, self.plan)
                self.wait_round(tasks)
            got = [t for t in tasks if t.instance is not None]
            if len(got) == len(tasks) or self.halt is not None:
                return
            failed = [e for t in tasks for e in t.errors if e.kind is not ErrorKind.CAPACITY]
            if got:
                ids = [t.instance.instance_id for t in got if t.instance is not None]
                left = self.nova.release(ids, self.request_id)
                error = short_whole(len(got), len(tasks), attempt.flavor, attempt.zone, not left)
                tasks[0].errors.append(error)
                if left:
                    return
                for task in got:
                    task.instance, task.server_id = None, None
            if failed:
                return
        else:
            for task in tasks:
                task.done = True
            return
        if multi is not None:  # adopted whole: they still need their node tags
            multi.tag(tasks)

    # ------------------------------------------------------------------ reuse

    def adopt(self, tasks: list[NodeTask]) -> None:
        """Servers of these names from earlier tries: reuse ours, clear failed ones."""
        wanted = {t.name: t for t in tasks}
        found: dict[str, list[Any]] = {}
        for server in self.nova.our_servers():
            if server.name in wanted:
                found.setdefault(server.name, []).append(server)
        for name, servers in found.items():
            self.adopt_one(wanted[name], servers)

    def adopt_one(self, task: NodeTask, servers: list[Any]) -> None:
        live, deleting = [], []
        for server in servers:
            if str(server.status).upper() == "ERROR":  # a failed try: clear it, try again
                self.discard(str(server.id))
            elif getattr(server, "task_state", None) == "deleting":
                deleting.append(server)
            else:
                live.append(server)
        mine = [s for s in live if (s.metadata or {}).get(TAG_REQUEST) == self.request_id]
        if mine:
            self.reuse(task, mine[0])
        elif live:
            other = (live[0].metadata or {}).get(TAG_REQUEST)
            message = f"server {task.name} ({live[0].id}) exists for request {other}"
            task.fail(ErrorKind.OTHER, "NameInUse", message)
        elif deleting:
            message = f"server {task.name} is still being deleted"
            task.fail(ErrorKind.TRANSIENT, "Deleting", message)

    def reuse(self, task: NodeTask, server: Any) -> None:
        log.info("reusing server %s (%s) of request %s", task.name, server.id, self.request_id)
        task.server_id, task.server = str(server.id), server
        flavor = instance_of(server, self.names).instance_type
        tried = [a for a in task.attempts if a.flavor == flavor or a.flavor_id == flavor]
        if tried:  # later rounds go on with the flavors after this one
            task.current = tried[0]
            while task.attempts and task.attempts[0] != tried[0]:
                task.attempts.popleft()
            task.attempts.popleft()
        if str(server.status).upper() not in BUILDING:
            task.instance = instance_of(server, self.names)

    def discard(self, server_id: str) -> None:
        """Delete a failed server; if that fails too, say so and go on (reconcile cleans up)."""
        try:
            self.nova.delete_server(server_id)
        except ProviderError as exc:
            if exc.kind is ErrorKind.AUTH:
                raise
            log.warning("could not delete failed server %s: %s", server_id, exc)

    # ------------------------------------------------------------------ create

    def create_round(self, tasks: list[NodeTask], plan: ServerPlan) -> None:
        todo = [t for t in tasks if t.wants_server]
        self.nova.parallel(lambda t: self.create_one(t, plan), todo)

    def create_one(self, task: NodeTask, plan: ServerPlan) -> None:
        task.current = task.attempts.popleft()
        halt = self.halt
        if halt is not None:
            task.fail(halt.kind, halt.code, halt.args[0])
            return
        what = f"creating server {task.name} ({task.current.flavor})"
        # an SR-IOV port is made first, with the attributes: it fails like the create
        server = self.create(what, lambda: self.server_attrs(task, plan), [task])
        if server is not None:
            task.server_id = str(server.id)

    def create(
        self, what: str, attrs: Callable[[], dict[str, Any]], tasks: Sequence[NodeTask]
    ) -> Any | None:
        """One create_server call (None when refused: each task failed, and QUOTA or
        THROTTLED stops the creations still to come)."""
        compute = self.nova.service("compute")
        try:
            made = attrs()
            return self.nova.call(what, lambda: compute.create_server(**made), operation="create")
        except ProviderError as exc:
            if exc.kind is ErrorKind.AUTH:
                raise
            for task in tasks:
                retry = exc.kind is ErrorKind.CAPACITY and bool(task.attempts)
                task.fail(exc.kind, exc.code, exc.args[0], final=not retry)
            if exc.kind in (ErrorKind.QUOTA, ErrorKind.THROTTLED):
                self.halt = exc
            return None

    def server_attrs(self, task: NodeTask, plan: ServerPlan) -> dict[str, Any]:
        attempt = task.current
        assert attempt is not None
        attrs = self.base_attrs(attempt, task.name)
        attrs["metadata"][TAG_NODE] = task.node
        if self.spec.fabric == "sriov" and isinstance(plan.networks, list):
            port = ensure_port(self.nova, plan.networks[0]["uuid"], task.name)
            attrs["networks"] = [{"port": port}]
            attrs["metadata"][PORT_KEY] = port
        return attrs

    def base_attrs(self, attempt: Attempt, name: str) -> dict[str, Any]:
        """create_server's arguments for one attempt: our tags and the request id, no node."""
        spec, plan = self.spec, self.plan
        tags = ours(self.nova.cluster, spec.template, self.request_id, spec.tags)
        attrs: dict[str, Any] = {
            "name": name,
            "flavor_id": attempt.flavor_id,
            "networks": plan.networks,
            "metadata": dict(tags),
        }
        if spec.root_volume_gb is None:
            attrs["image_id"] = plan.image_id
        else:  # boot from a new volume of that size made from the image, gone with the server
            attrs["block_device_mapping"] = [boot_volume(plan.image_id, spec.root_volume_gb)]
        if spec.user_data:
            attrs["user_data"] = base64.b64encode(spec.user_data.encode()).decode("ascii")
        if plan.key_name:
            attrs["key_name"] = plan.key_name
        if spec.security_groups:
            attrs["security_groups"] = [{"name": g} for g in spec.security_groups]
        if attempt.zone:
            attrs["availability_zone"] = attempt.zone
        if plan.group_id:
            attrs["scheduler_hints"] = {"group": plan.group_id}
        return attrs

    # ------------------------------------------------------------------ wait

    def wait_round(self, tasks: list[NodeTask]) -> None:
        """Read the servers until none of this round's is BUILDing, or the time is up."""
        waiting = [t for t in tasks if t.waiting]
        timing = self.nova.timing
        deadline = time.monotonic() + timing.active_timeout_s
        while waiting:
            time.sleep(timing.poll_interval_s)
            seen = {str(s.id): s for s in self.nova.our_servers()}
            progress_marks.beat()  # a build that takes minutes is polled, not stalled
            waiting = [t for t in waiting if not self.settle(t, seen.get(t.server_id or ""))]
            if waiting and time.monotonic() >= deadline:
                for task in waiting:
                    log.warning("server %s still %s: returned as pending", task.name, "BUILD")
                    task.instance = instance_of(task.server, self.names)
                return

    def settle(self, task: NodeTask, server: Any) -> bool:
        """True when the server is done building (or gone); False while it is BUILDing."""
        if server is None:
            task.server_id = None
            task.fail(ErrorKind.OTHER, "ServerGone", f"server {task.name} vanished while building")
            return True
        task.server = server
        status = str(server.status).upper()
        if status in BUILDING:
            return False
        if status != "ERROR":
            task.instance = instance_of(server, self.names)
            return True
        failure = fault_failure(self.fault_of(server))
        log.info("server %s went to ERROR (%s): %s", task.name, failure.code, failure.message)
        self.discard(str(server.id))
        task.server_id = None
        retry = failure.kind is ErrorKind.CAPACITY and bool(task.attempts)
        message = f"server {task.name}: {failure.message}"
        task.fail(failure.kind, failure.code, message, final=not retry)
        return True

    def fault_of(self, server: Any) -> Any:
        """The server's fault. Nova Zed's listing left it out for a server that no host took
        (one that lives in cell0; seen in tests/realnova); reading the server by id has it."""
        fault = getattr(server, "fault", None)
        if fault:
            return fault
        again = self.nova.get_server(str(server.id))
        return getattr(again, "fault", None) if again is not None else None


def boot_volume(image_id: str, size_gb: int) -> dict[str, Any]:
    """Nova's block_device_mapping_v2 entry for booting from a new volume (no imageRef)."""
    return {
        "boot_index": 0,
        "uuid": image_id,
        "source_type": "image",
        "destination_type": "volume",
        "volume_size": size_gb,
        "delete_on_termination": True,
    }


def _by_name_and_id(flavors: list[Any]) -> dict[str, str]:
    known: dict[str, str] = {}
    for flavor in flavors:
        known[str(flavor.id)] = str(flavor.id)
        known.setdefault(str(flavor.name), str(flavor.id))
    return known

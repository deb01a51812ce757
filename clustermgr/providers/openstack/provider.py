"""OpenStack provider: Nova servers in one region of one clouds.yaml cloud.

Only client.py and errors.py import openstacksdk. Every server carries our tags as Nova
metadata; list/terminate only ever touch servers whose metadata names this cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, ClassVar, TypeVar

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import (
    TAG_CLUSTER,
    CloudInstance,
    InstanceType,
    LaunchResult,
    LaunchSpec,
)
from clustermgr.providers.launch_groups import PlacementGroup, group_name
from clustermgr.providers.openstack import server_groups
from clustermgr.providers.openstack.client import OpenStackClient, timing_for
from clustermgr.providers.openstack.errors import (
    NOT_FOUND_CODES,
    SDK,
    SDK_ERRORS,
    classify,
    is_not_found,
)
from clustermgr.providers.openstack.glance import GlanceCopies
from clustermgr.providers.openstack.launch import Launcher, ServerPlan, plan_servers
from clustermgr.providers.openstack.shapes import instance_of, instance_type_of
from clustermgr.providers.openstack.sriov import PORT_KEY, delete_port
from clustermgr.providers.skeleton import Check, CloudProvider, TtlCache, Words, parallel

log = logging.getLogger(__name__)

T = TypeVar("T")
U = TypeVar("U")


class OpenStackProvider(CloudProvider[ServerPlan]):
    kind: ClassVar[str] = "openstack"
    sdk = SDK
    words = Words(
        "server",
        "flavor",
        credential_check="token",
        auth_message="credentials from {source} were not accepted: {message}",
    )

    def __init__(self, settings: ProviderSettings, cluster: str) -> None:
        super().__init__(settings, cluster)
        self.client = OpenStackClient(settings)
        self.cloud = self.client.cloud
        self.timing = timing_for(settings)
        self._flavors: TtlCache[list[Any]] = TtlCache()

    @classmethod
    def capabilities(cls, settings: ProviderSettings) -> Sequence[object]:
        """Machine-image copy (clustermgr.providers.capabilities): an upload through the
        head from another region of the same cloud into this one's Glance."""

        def region_of(region: str) -> OpenStackProvider:
            return cls(settings.model_copy(update={"region": region}), "")

        return (GlanceCopies(cls(settings, ""), region_of),)

    # ------------------------------------------------------------------ connection

    def credential_source(self) -> str:
        return self.client.credential_source()

    def connection(self) -> Any:
        """The openstacksdk Connection (made once; authentication happens on first use)."""
        try:
            return self.client.connection()
        except SDK_ERRORS as exc:
            raise self.error(exc, "reading clouds.yaml") from None

    def service(self, name: str) -> Any:
        """A service proxy ("compute", "image", "network"); the first one authenticates."""
        return self.call(f"connecting to {name}", lambda: getattr(self.connection(), name))

    def call(self, what: str, fn: Callable[[], T], operation: str = "") -> T:
        """Run one SDK call; 429 is retried with backoff, every failure becomes ProviderError."""
        attempts = max(1, self.timing.throttle_attempts)
        for attempt in range(attempts):
            try:
                return fn()
            except ProviderError:
                raise
            except SDK_ERRORS as exc:
                failure = classify(exc, operation)
                if failure.kind is ErrorKind.THROTTLED and attempt + 1 < attempts:
                    delay = self.timing.backoff(attempt, failure.retry_after)
                    log.info("%s: throttled, retrying in %.2fs", what, delay)
                    time.sleep(delay)
                    continue
                raise self.error(failure, what) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        return self.timing.backoff(attempt, retry_after)

    # ------------------------------------------------------------------ catalog

    def flavors(self) -> list[Any]:
        """Every flavor with its extra specs (in the listing from microversion 2.61; read one
        flavor at a time from older clouds, and for flavors that have none)."""

        def read() -> list[Any]:
            compute = self.service("compute")
            return self.call(
                "listing flavors",
                lambda: list(compute.flavors(details=True, get_extra_specs=True)),
            )

        return self._flavors.get(read)

    def refresh_flavors(self) -> list[Any]:
        self._flavors.clear()
        self.catalog_cache.clear()
        return self.flavors()

    def flavor_names(self) -> dict[str, str]:
        """Flavor id -> name, for servers from clouds older than microversion 2.47."""
        try:
            return {str(f.id): str(f.name) for f in self.flavors()}
        except ProviderError as exc:
            if exc.kind is ErrorKind.AUTH:
                raise
            return {}

    def read_catalog(self) -> list[InstanceType]:
        types = {t.name: t for t in (instance_type_of(f) for f in self.flavors())}
        return sorted(types.values(), key=lambda t: t.name)

    # ------------------------------------------------------------------ list

    def our_servers(self) -> list[Any]:
        """Every server whose metadata names this cluster (all pages)."""
        compute = self.service("compute")
        servers = self.call("listing servers", lambda: list(compute.servers(details=True)))
        return [s for s in servers if (s.metadata or {}).get(TAG_CLUSTER) == self.cluster]

    def list_instances(self) -> dict[str, CloudInstance]:
        servers = self.our_servers()
        names = self.flavor_names() if servers else {}
        instances = (instance_of(s, names) for s in servers)
        return {inst.instance_id: inst for inst in instances}

    # ------------------------------------------------------------------ launch

    def prepare(self, spec: LaunchSpec, count: int, request_id: str) -> ServerPlan | None:
        plan = plan_servers(self, spec, count, request_id)
        if not plan.nodes:
            return None
        group = server_groups.launch_group(self, spec, len(plan.nodes), request_id)
        return replace(plan, group_id=group)

    def start(self, plan: ServerPlan, result: LaunchResult) -> None:
        Launcher(self, plan).run(result)
        if plan.group_id and plan.spec.launch_group and not result.instances:
            # the server group made for this launch, which started nothing: deleted now
            name = group_name(self.cluster, plan.spec.template, plan.request_id)
            try:
                server_groups.delete(self, PlacementGroup(name, plan.group_id, plan.request_id))
            except ProviderError as exc:
                log.warning("server group %s not deleted: %s", name, exc)

    def placement_groups(self) -> list[PlacementGroup]:
        return server_groups.listed(self)

    def delete_placement_group(self, group: PlacementGroup) -> bool:
        return server_groups.delete(self, group)

    # ------------------------------------------------------------------ terminate

    def remove(self, ids: list[str], request_id: str) -> None:
        self.parallel(self._terminate_one, ids)

    def _terminate_one(self, server_id: str) -> None:
        server = self.get_server(server_id)
        if server is None:
            return
        if (server.metadata or {}).get(TAG_CLUSTER) != self.cluster:
            log.warning("not terminating server %s: it is not tagged as ours", server_id)
            return
        self.delete_server(server_id)
        port = (server.metadata or {}).get(PORT_KEY)
        if port:  # an SR-IOV port of ours: Nova detaches it but does not delete it
            delete_port(self, str(port))

    def get_server(self, server_id: str) -> Any | None:
        """The server, or None when it is gone."""
        compute = self.service("compute")
        try:
            return self.call(f"reading server {server_id}", lambda: compute.get_server(server_id))
        except ProviderError as exc:
            if exc.code in NOT_FOUND_CODES:
                return None
            raise

    def delete_server(self, server_id: str) -> None:
        """Delete; a server that is already gone is fine."""
        compute = self.service("compute")

        def delete() -> None:
            try:
                compute.delete_server(server_id, ignore_missing=True)
            except SDK_ERRORS as exc:
                if not is_not_found(exc):
                    raise

        self.call(f"deleting server {server_id}", delete, operation="delete")

    def rename_server(self, server_id: str, name: str) -> None:
        """PUT /servers/{id}: Nova renames a server in any state, BUILD included."""
        compute = self.service("compute")
        self.call(
            f"renaming server {server_id} to {name}",
            lambda: compute.update_server(server_id, name=name),
        )

    def set_metadata(self, server_id: str, metadata: dict[str, str]) -> None:
        """Add or change these keys; the others stay. Nova refuses it (409) while the server
        builds."""
        compute = self.service("compute")
        self.call(
            f"setting metadata of server {server_id}",
            lambda: compute.set_server_metadata(server_id, **metadata),
        )

    # ------------------------------------------------------------------ check

    def checks(self) -> list[Check]:
        return [("compute endpoint", self._check_compute), ("flavors", self.check_catalog)]

    def check_credentials(self) -> str:
        conn = self.connection()
        # session.get_token, not Connection.authorize: that one hides the 401 as SDKException
        self.call("requesting a token", conn.session.get_token)
        return f"token issued ({self.credential_source()})"

    def _check_compute(self) -> str:
        compute = self.service("compute")
        endpoint = self.call("finding the compute endpoint", compute.get_endpoint)
        self.call(
            "listing servers", lambda: next(iter(compute.servers(details=False, limit=1)), None)
        )
        return f"compute endpoint {endpoint} in {self.region} reachable"

    # ------------------------------------------------------------------ helpers

    def parallel(self, fn: Callable[[T], U], items: Sequence[T]) -> list[U]:
        return parallel(fn, items, self.timing.max_workers, "openstack")

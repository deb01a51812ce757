"""A small fake OpenStack cloud (Keystone v3 + Nova v2.1 + Glance v2 + Neutron v2.0) over
plain HTTP on 127.0.0.1, for the real openstacksdk.

It answers what openstacksdk calls for clustermgr: version discovery documents, the password
token flow (`POST /identity/v3/auth/tokens`, a catalog pointing back at this server, 401 for
a wrong password), flavors (detail, with `extra_specs`), servers (create, multi-create with
`min_count`/`max_count` as Nova does it (tests/fakes/openstack_multicreate.py), list and
detail list paged with `marker`/`limit` and `servers_links`, filtered by `name`, `status`
and `reservation_id`, get, rename, metadata set (409 while BUILD), delete), Glance v2
images with their data (tests/fakes/glance_fake.py: create, upload, download, update,
delete), networks by name or id, and key pairs. `image_regions` adds regions that have
only a Glance (each its own store, in the catalog as `image` endpoints of that region), the
source of a copy. A new server is BUILD for `build_polls` reads, then ACTIVE, or ERROR with
the fault {"code": 500, "message": "No valid host was found. ..."} when capacity is
exhausted (or another fault injected by `fail_next_creates`).

Where each answer's shape was seen (Debian 12's nova, 2:26.2.2 "Zed", python3-nova):
- the microversion range: nova/api/openstack/api_version_request.py `_MAX_API_VERSION = '2.93'`;
- server faults: nova/compute/utils.py `exception_to_dict` (code 500 unless the exception has
  another, message the exception's formatted text), nova/exception.py msg_fmt for
  NoValidHost, BuildAbortException, ImageUnacceptable, MaxRetriesExceeded, TooManyInstances
  (code 413), and nova/conductor/manager.py (MaxRetriesExceeded "Exhausted all hosts
  available for retrying build failures ..."; the quota recheck's TooManyInstances buries
  the server in ERROR);
- create refusals: nova/api/openstack/compute/servers.py (OverQuota and
  ExternalNetworkAttachForbidden both as HTTPForbidden, 403, body {"forbidden": {...}}).

Faults are injected from the test process through thread-safe methods (`fail_next`,
`fail_next_creates`, `limit_capacity`, `set_quota`, `set_build_polls`, `set_password`,
`hold_next`: tests/fakes/gate.py), or from
another process by POSTing JSON to `/_fake/<method>` (see CONTROL_METHODS, `remote_control`).
`python -m tests.fakes.openstack_fake CLOUDS_YAML` runs one until SIGTERM, writes a clouds.yaml
for it and prints its connection details as one JSON line, for end-to-end tests where the
provider lives in a separate daemon process (give that process OS_CLIENT_CONFIG_FILE).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import secrets
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import requests

from tests.fakes import http_fake
from tests.fakes import openstack_multicreate as multicreate
from tests.fakes.glance_fake import Glance
from tests.fakes.http_fake import JSON, HttpFake, Reply
from tests.fakes.openstack_server_groups import BadRequest, NotFound, ServerGroups

REGION = "RegionOne"
USERNAME = "burst-user"
PROJECT = "burst-project"
DOMAIN = "Default"
CLOUD_NAME = "fakestack"
NOVA_MAX_MICROVERSION = "2.93"  # nova Zed, Debian 12 (nova/api/openstack/api_version_request.py)
NO_VALID_HOST = "No valid host was found. There are not enough hosts available."
QUOTA_MESSAGE = "Quota exceeded for instances: Requested 1, but already used {used} of {limit}"
# nova/exception.py ExternalNetworkAttachForbidden, a 403 on create (servers.py)
EXTERNAL_NETWORK_MESSAGE = "It is not allowed to create an interface on external network {net}"
# nova/exception.py BuildAbortException wrapping ImageUnacceptable (compute/manager.py
# _build_resources): a fault with code 500, like NoValidHost, that is not capacity
BUILD_ABORTED = "Build of instance {uuid} aborted: Image {image} is unacceptable: {why}"
# nova/exception.py MaxRetriesExceeded, raised by conductor/manager.py after every host
# failed to build the server (code 500)
MAX_RETRIES = (
    "Exceeded maximum number of retries. Exhausted all hosts available for retrying build "
    "failures for instance {uuid}."
)
# nova/exception.py MultiplePortsNotApplicable: a port is one server's (multi-create)
MULTIPLE_WITH_PORT = (
    "Failed to launch instances: Unable to launch multiple instances with a single "
    "configured port ID. Please launch your instance one by one with different ports."
)
THROTTLE_MESSAGE = "This request was rate-limited."
# nova/exception.py PortLimitExceeded (OverQuota, HTTPForbidden): compute/api.py raises it when
# validate_networks finds no port left for the request under the project's Neutron port quota
PORT_LIMIT_MESSAGE = "Maximum number of ports exceeded"
# nova/compute/manager.py _build_and_run_instance: Neutron's IpAddressGenerationFailure as
# NoMoreFixedIps ("No fixed IP addresses available for network: %(net)s") in BuildAbortException
NO_FIXED_IP = (
    "Build of instance {uuid} aborted: Failed to allocate the network(s) with error No fixed "
    "IP addresses available for network: {net}, not rescheduling."
)
UPDATED = "2013-07-23T11:33:21Z"


def _flavor(fid: str, name: str, vcpus: int, ram_mb: int, specs: dict[str, str]) -> JSON:
    return {
        "id": fid,
        "name": name,
        "vcpus": vcpus,
        "ram": ram_mb,
        "disk": 40,
        "OS-FLV-EXT-DATA:ephemeral": 0,
        "swap": 0,
        "rxtx_factor": 1.0,
        "os-flavor-access:is_public": True,
        "OS-FLV-DISABLED:disabled": False,
        "description": None,
        "extra_specs": dict(specs),
    }


DEFAULT_FLAVORS: list[JSON] = [
    _flavor("1", "m1.small", 1, 2048, {}),
    _flavor("2", "m1.large", 4, 8192, {"hw:cpu_policy": "dedicated"}),
    _flavor("10", "g1.a100x8", 96, 1_048_576, {"pci_passthrough:alias": "a100:8"}),
    _flavor("11", "g1.a100x1", 12, 131_072, {"pci_passthrough:alias": "a100:1"}),
    _flavor(
        "12", "g1.pgpu", 16, 65_536, {"resources:PGPU": "2", "trait:CUSTOM_GPU_L40S": "required"}
    ),
]
DEFAULT_IMAGES = {"ubuntu-24.04": "7e1f3c2a-0000-4000-8000-000000000001"}
DEFAULT_NETWORKS = {"burst-net": "5b0e9d1c-0000-4000-8000-000000000002"}
DEFAULT_KEYPAIRS = {"burst-key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFake burst"}

# Which control endpoint names map to which public methods (for a fake in another process).
CONTROL_METHODS = (
    "fail_next",
    "fail_next_creates",
    "limit_capacity",
    "set_quota",
    "set_network_limits",
    "set_build_polls",
    "set_password",
    "clear_faults",
    "set_status",
)


class NovaError(Exception):
    """Answer with an OpenStack error body: {"<kind>": {"code": status, "message": ...}}."""

    KINDS = {
        400: "badRequest",
        401: "unauthorized",
        403: "forbidden",
        404: "itemNotFound",
        409: "conflictingRequest",
        413: "overLimit",
        429: "overLimit",
        500: "computeFault",
        503: "serviceUnavailable",
    }

    def __init__(self, status: int, message: str, retry_after: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after

    def body(self) -> JSON:
        if self.status == 401:  # keystonemiddleware / keystone shape
            return {"error": {"code": 401, "title": "Unauthorized", "message": self.message}}
        kind = self.KINDS.get(self.status, "computeFault")
        return {kind: {"code": self.status, "message": self.message}}


class NeutronError(NovaError):
    """Neutron's error body: {"NeutronError": {"type": <exception class>, "message": ...,
    "detail": ""}} (neutron/api/api_common.py get_exception_data); OverQuota and
    IpAddressGenerationFailure are Conflicts (409) in neutron_lib/exceptions."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(status, message)
        self.kind = kind

    def body(self) -> JSON:
        return {"NeutronError": {"type": self.kind, "message": self.message, "detail": ""}}


@dataclass
class Fault:
    """Answer the next `remaining` requests of `method` whose path contains `path_contains`."""

    method: str
    path_contains: str
    status: int
    message: str
    remaining: int
    retry_after: str | None = None

    def matches(self, method: str, path: str) -> bool:
        return self.remaining > 0 and method == self.method and self.path_contains in path


@dataclass
class FakeState:
    servers: dict[str, JSON] = field(default_factory=dict)  # insertion order = creation order
    tokens: dict[str, datetime] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    capacity: int | None = None  # servers that can still become ACTIVE (None: unlimited)
    flavor_capacity: dict[str, int] = field(default_factory=dict)  # the same, per flavor name
    capacity_faults: int = 0  # the next N created servers go to ERROR "No valid host"
    build_faults: list[str] = field(default_factory=list)  # the next servers' other faults
    quota_instances: int | None = None  # 403 "Quota exceeded for instances" above this
    next_address: int = 10
    ports: dict[str, JSON] = field(default_factory=dict)  # Neutron ports by id
    port_quota: int | None = None  # the project's Neutron port quota (None: unlimited)
    free_addresses: int | None = None  # addresses left on the networks' subnets (None: many)


class Req(http_fake.Req):
    def json(self) -> JSON:
        try:
            data = json.loads(self.body or b"{}")
        except ValueError:
            raise NovaError(400, "Malformed request body") from None
        if not isinstance(data, dict):
            raise NovaError(400, "Malformed request body")
        return data


class FakeOpenStack(HttpFake):
    """The fake cloud. Start with `start()` (or `with FakeOpenStack() as fake:`), then `stop()`.
    The requests seen are recorded as (method, path?query)."""

    thread_name = "openstack-fake"
    control_methods = CONTROL_METHODS

    def __init__(
        self,
        *,
        page_size: int = 2,
        build_polls: int = 1,
        password: str | None = None,
        region: str = REGION,
        max_microversion: str = NOVA_MAX_MICROVERSION,
        flavors: list[JSON] | None = None,
        image_regions: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.username = USERNAME
        self.project = PROJECT
        self.domain = DOMAIN
        self.password = password or "fake-pw-" + secrets.token_hex(8)
        self.region = region
        # Below 2.61 flavors come without extra_specs; below 2.47 a server's flavor is an id.
        self.max_microversion = max_microversion
        self.page_size = page_size  # Nova's max_limit: the most servers on one page
        self.build_polls = build_polls
        self.flavors = copy.deepcopy(flavors if flavors is not None else DEFAULT_FLAVORS)
        self.networks = dict(DEFAULT_NETWORKS)
        self.keypairs = dict(DEFAULT_KEYPAIRS)
        self.project_id = uuid.uuid5(uuid.NAMESPACE_DNS, PROJECT).hex
        self.glances = {r: Glance(self.project_id) for r in (region, *image_regions)}
        for name, image_id in DEFAULT_IMAGES.items():
            self.glances[region].seed(name, b"\0" * 1024, image_id)
        self.user_id = uuid.uuid5(uuid.NAMESPACE_DNS, USERNAME).hex
        self.server_groups = ServerGroups(self.project_id, self.user_id)
        self.state = FakeState()

    @property
    def images(self) -> dict[str, str]:
        """name -> id of the active images in the main region's Glance (what Nova boots)."""
        return self.glances[self.region].active()

    def glance(self, region: str | None = None) -> Glance:
        """A region's Glance (the main region's by default), for a test to seed or read;
        hold `lock` around changes while the fake serves."""
        return self.glances[region or self.region]

    # ----------------------------------------------------------------- the server's part

    def reply_headers(self, path: str) -> dict[str, str]:
        headers = {"X-Openstack-Request-Id": f"req-{uuid.uuid4()}"}
        if path.startswith("/compute/"):
            headers["OpenStack-API-Version"] = f"compute {self.max_microversion}"
        return headers

    def error(self, status: int, message: str) -> NovaError:
        return NovaError(status, message)

    @property
    def auth_url(self) -> str:
        return f"{self.url}/identity/v3"

    def info(self) -> JSON:
        return {
            "url": self.url,
            "auth_url": self.auth_url,
            "region": self.region,
            "username": self.username,
            "password": self.password,
            "project_name": self.project,
            "domain": self.domain,
            "image": next(iter(self.images)),
            "network": next(iter(self.networks)),
            "key_name": next(iter(self.keypairs)),
            "flavors": [f["name"] for f in self.flavors],
        }

    def cloud_entry(self, password: str | None = None) -> JSON:
        """One `clouds:` entry of a clouds.yaml for this fake."""
        return {
            "auth_type": "password",
            "auth": {
                "auth_url": self.auth_url,
                "username": self.username,
                "password": self.password if password is None else password,
                "project_name": self.project,
                "user_domain_name": self.domain,
                "project_domain_name": self.domain,
            },
            "region_name": self.region,
            # every region a connection may name (openstacksdk refuses any other)
            **({"regions": list(self.glances)} if len(self.glances) > 1 else {}),
            "identity_api_version": 3,
            "interface": "public",
        }

    def write_clouds_yaml(self, path: Path, clouds: dict[str, str | None] | None = None) -> Path:
        """Write a clouds.yaml: {cloud name: password (None: the right one)}. JSON is YAML."""
        wanted = clouds if clouds is not None else {CLOUD_NAME: None}
        doc = {"clouds": {name: self.cloud_entry(pw) for name, pw in wanted.items()}}
        path.write_text(json.dumps(doc, indent=2) + "\n")
        path.chmod(0o600)
        return path

    # ----------------------------------------------------------------- fault injection

    def fail_next(
        self,
        method: str,
        path_contains: str,
        status: int,
        attempts: int = 1,
        message: str = "",
        retry_after: str | None = None,
    ) -> None:
        """Fail the next `attempts` requests of `method` whose path contains `path_contains`
        (e.g. "/compute/v2.1/servers") with HTTP `status` and an OpenStack error body."""
        fault = Fault(
            method.upper(),
            path_contains,
            status,
            message or f"injected {status}",
            attempts,
            retry_after,
        )
        with self.lock:
            self.state.faults.append(fault)

    def fail_next_creates(self, kind: str, attempts: int = 1, retry_after: str = "0") -> None:
        """Fail the next `attempts` server creations as OpenStack signals `kind`:
        "capacity": accepted, then the server goes to ERROR with fault 500 "No valid host";
        "broken-image": accepted, then ERROR with fault 500 "Build of instance ... aborted";
        "retries": accepted, then ERROR with fault 500 "Exceeded maximum number of retries";
        "quota-recheck": accepted, then ERROR with fault 413 "Quota exceeded for instances";
        "quota": 403 "Quota exceeded for instances"; "policy": 403 "It is not allowed to
        create an interface on external network"; "throttle": 429 with Retry-After."""
        if kind == "capacity":
            with self.lock:
                self.state.capacity_faults += attempts
        elif kind in ("broken-image", "retries", "quota-recheck"):
            with self.lock:
                self.state.build_faults.extend([kind] * attempts)
        elif kind == "policy":
            message = EXTERNAL_NETWORK_MESSAGE.format(net=next(iter(self.networks.values())))
            self.fail_next("POST", "/compute/v2.1/servers", 403, attempts, message)
        elif kind == "quota":
            message = QUOTA_MESSAGE.format(used=10, limit=10) + " instances"
            self.fail_next("POST", "/compute/v2.1/servers", 403, attempts, message)
        elif kind == "throttle":
            self.fail_next(
                "POST", "/compute/v2.1/servers", 429, attempts, THROTTLE_MESSAGE, retry_after
            )
        else:
            raise ValueError(f"unknown fault kind {kind!r}")

    def set_network_limits(
        self, port_quota: int | None = None, free_addresses: int | None = None
    ) -> None:
        """The project's Neutron port quota (a server takes a port on each of its networks)
        and the addresses left on the networks' subnets (None: no limit). Over the quota, a
        server create is 403 PortLimitExceeded and a port create 409 OverQuota; without an
        address, a server is accepted and goes to ERROR with NoMoreFixedIps in its fault,
        and a port create is 409 IpAddressGenerationFailure."""
        with self.lock:
            self.state.port_quota = port_quota
            self.state.free_addresses = free_addresses

    def limit_capacity(self, instances: int | None, instance_type: str | None = None) -> None:
        """Only `instances` more servers (of flavor `instance_type`, by name, when named) can
        go ACTIVE, then "No valid host" (None: no limit)."""
        with self.lock:
            if instance_type is None:
                self.state.capacity = instances
            elif instances is None:
                self.state.flavor_capacity.pop(instance_type, None)
            else:
                self.state.flavor_capacity[instance_type] = instances

    def set_quota(self, instances: int | None) -> None:
        """At most `instances` servers may exist; more is 403 (None: no quota)."""
        with self.lock:
            self.state.quota_instances = instances

    def set_build_polls(self, polls: int) -> None:
        with self.lock:
            self.build_polls = polls

    def set_password(self, password: str) -> None:
        """Change the user's password (and revoke every token issued so far)."""
        with self.lock:
            self.password = password
            self.state.tokens.clear()

    def set_status(self, server_id: str, status: str) -> None:
        with self.lock:
            server = self.state.servers[server_id]
            server["status"] = status
            server["_fate"] = status

    def clear_faults(self) -> None:
        with self.lock:
            self.state.faults.clear()
            self.state.capacity = None
            self.state.flavor_capacity.clear()
            self.state.capacity_faults = 0
            self.state.build_faults.clear()
            self.state.quota_instances = None
            self.state.port_quota = None
            self.state.free_addresses = None

    # ----------------------------------------------------------------- inspection

    def servers(self) -> list[JSON]:
        """Every server that exists, as stored (with the fake's own `_` keys)."""
        with self.lock:
            return copy.deepcopy(list(self.state.servers.values()))

    def server_names(self) -> list[str]:
        return sorted(s["name"] for s in self.servers())

    # ----------------------------------------------------------------- request handling

    def serve(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Reply:
        parts = urlsplit(raw_path)
        path = unquote(parts.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        req = Req(method, path, query, [s for s in path.split("/") if s], body)
        self.record(method, raw_path)
        try:
            if path.startswith(http_fake.CONTROL_PREFIX):
                return self.control(path.removeprefix(http_fake.CONTROL_PREFIX), body)
            with self.lock:
                return self._route(req, headers)
        except NovaError as err:
            extra = {"Retry-After": err.retry_after} if err.retry_after else {}
            return Reply(err.status, err.body(), extra)

    def _route(self, req: Req, headers: dict[str, str]) -> Reply:
        service = req.segs[0] if req.segs else ""
        if service.startswith("image-") and service[len("image-") :] in self.glances:
            return self._glance_of(service[len("image-") :], req, headers)
        if service == "identity":
            return self._identity(req)
        discovery = {"compute": self._nova_versions, "image": self._glance_versions}
        discovery["networking"] = self._neutron_versions
        if service in discovery and req.method == "GET" and len(req.segs) <= 2:
            return discovery[service](req)
        if service not in discovery:
            raise NovaError(404, f"no service at {req.path}")
        self._authorize(headers)
        self._inject(req)
        if service == "compute":
            return self._compute(req)
        if service == "image":
            return self.glances[self.region].route(req)
        return self._neutron(req)

    def _glance_of(self, region: str, req: Req, headers: dict[str, str]) -> Reply:
        """An image-only region's Glance, at /image-REGION."""
        if req.method == "GET" and len(req.segs) <= 2:
            return self._glance_versions(req)
        self._authorize(headers)
        self._inject(req)
        return self.glances[region].route(req)

    def _authorize(self, headers: dict[str, str]) -> None:
        token = headers.get("x-auth-token", "")
        expires = self.state.tokens.get(token)
        if expires is None or expires < datetime.now(UTC):
            raise NovaError(401, "The request you have made requires authentication.")

    def _inject(self, req: Req) -> None:
        target = req.path + ("?" + urlencode(req.query) if req.query else "")
        for fault in self.state.faults:
            if fault.matches(req.method, target):
                fault.remaining -= 1
                raise NovaError(fault.status, fault.message, fault.retry_after)

    # Keystone ----------------------------------------------------------------

    def _keystone_version(self) -> JSON:
        return {
            "id": "v3.14",
            "status": "stable",
            "updated": "2020-04-07T00:00:00Z",
            "links": [{"rel": "self", "href": f"{self.url}/identity/v3/"}],
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}
            ],
        }

    def _identity(self, req: Req) -> Reply:
        rest = req.segs[1:]
        if req.method == "GET" and rest == []:
            return Reply(300, {"versions": {"values": [self._keystone_version()]}})
        if req.method == "GET" and rest == ["v3"]:
            return Reply(200, {"version": self._keystone_version()})
        if req.method == "POST" and rest == ["v3", "auth", "tokens"]:
            return self._issue_token(req.json())
        raise NovaError(404, f"no identity route {req.path}")

    def _issue_token(self, body: JSON) -> Reply:
        auth = body.get("auth", {})
        user = auth.get("identity", {}).get("password", {}).get("user", {})
        if user.get("name") != self.username or user.get("password") != self.password:
            raise NovaError(401, "The request you have made requires authentication.")
        token = "gAAAAA" + secrets.token_urlsafe(24)
        now = datetime.now(UTC)
        expires = now + timedelta(hours=1)
        self.state.tokens[token] = expires
        domain = {"id": "default", "name": self.domain}
        return Reply(
            201,
            {
                "token": {
                    "methods": ["password"],
                    "expires_at": _iso(expires, micro=True),
                    "issued_at": _iso(now, micro=True),
                    "audit_ids": [secrets.token_urlsafe(16)],
                    "user": {"id": self.user_id, "name": self.username, "domain": domain},
                    "project": {"id": self.project_id, "name": self.project, "domain": domain},
                    "roles": [{"id": "r1", "name": "member"}, {"id": "r2", "name": "reader"}],
                    "is_domain": False,
                    "catalog": self._catalog(),
                }
            },
            {"X-Subject-Token": token},
        )

    def _catalog(self) -> list[JSON]:
        services = [
            ("identity", "keystone", f"{self.url}/identity"),
            ("compute", "nova", f"{self.url}/compute/v2.1"),
            ("image", "glance", f"{self.url}/image"),
            ("network", "neutron", f"{self.url}/networking"),
        ]
        regions = {kind: [(self.region, url)] for kind, _, url in services}
        regions["image"] += [(r, f"{self.url}/image-{r}") for r in self.glances if r != self.region]
        return [
            {
                "type": kind,
                "name": name,
                "id": uuid.uuid5(uuid.NAMESPACE_URL, kind).hex,
                "endpoints": [
                    {
                        "id": uuid.uuid5(uuid.NAMESPACE_URL, kind + region + iface).hex,
                        "interface": iface,
                        "region": region,
                        "region_id": region,
                        "url": url,
                    }
                    for region, url in regions[kind]
                    for iface in ("public", "internal")
                ],
            }
            for kind, name, _ in services
        ]

    # discovery ---------------------------------------------------------------

    def _nova_version(self) -> JSON:
        return {
            "id": "v2.1",
            "status": "CURRENT",
            "version": self.max_microversion,
            "min_version": "2.1",
            "updated": UPDATED,
            "links": [{"rel": "self", "href": f"{self.url}/compute/v2.1/"}],
        }

    def _nova_versions(self, req: Req) -> Reply:
        if req.segs[1:] == ["v2.1"]:
            return Reply(200, {"version": self._nova_version()})
        if req.segs[1:]:
            raise NovaError(404, f"no compute version at {req.path}")
        return Reply(200, {"versions": [self._nova_version()]})

    def _glance_versions(self, req: Req) -> Reply:
        if req.segs[1:] not in ([], ["v2"]):
            raise NovaError(404, f"no image version at {req.path}")
        link = [{"rel": "self", "href": f"{self.url}/{req.segs[0]}/v2/"}]
        return Reply(300, {"versions": [{"id": "v2.16", "status": "CURRENT", "links": link}]})

    def _neutron_versions(self, req: Req) -> Reply:
        if req.segs[1:] not in ([], ["v2.0"]):
            raise NovaError(404, f"no network version at {req.path}")
        link = [{"rel": "self", "href": f"{self.url}/networking/v2.0/"}]
        return Reply(200, {"versions": [{"id": "v2.0", "status": "CURRENT", "links": link}]})

    # Nova --------------------------------------------------------------------

    def _compute(self, req: Req) -> Reply:
        rest = req.segs[2:]  # after /compute/v2.1
        head = rest[0] if rest else ""
        if head == "flavors":
            return self._flavors(req, rest[1:])
        if head == "servers":
            return self._servers(req, rest[1:])
        if head == "os-keypairs" and req.method == "GET":
            return self._keypairs(rest[1:])
        if head == "os-server-groups":
            return self._server_groups(req, rest[1:])
        raise NovaError(404, f"no compute route {req.path}")

    def _server_groups(self, req: Req, rest: list[str]) -> Reply:
        """tests/fakes/openstack_server_groups.py"""
        groups = self.server_groups
        try:
            if not rest and req.method == "POST":
                return Reply(200, groups.create(req.json()))
            if not rest and req.method == "GET":
                return Reply(200, groups.listed())
            if len(rest) == 1 and req.method == "GET":
                return Reply(200, groups.one(rest[0]))
            if len(rest) == 1 and req.method == "DELETE":
                groups.delete(rest[0])
                return Reply(204, None)
        except BadRequest as exc:
            raise NovaError(400, str(exc)) from None
        except NotFound as exc:
            raise NovaError(404, str(exc)) from None
        raise NovaError(404, f"no server group route {req.method} {req.path}")

    def _flavors(self, req: Req, rest: list[str]) -> Reply:
        if req.method != "GET":
            raise NovaError(405, "method not allowed")
        if rest in ([], ["detail"]):
            items = [f for f in self.flavors if not f["OS-FLV-DISABLED:disabled"]]
            if rest == []:
                items = [{"id": f["id"], "name": f["name"], "links": []} for f in items]
            return Reply(200, {"flavors": [self._flavor_view(f) for f in items]})
        flavor = self._flavor(rest[0])
        if rest[1:] == ["os-extra_specs"]:
            return Reply(200, {"extra_specs": dict(flavor["extra_specs"])})
        if rest[1:]:
            raise NovaError(404, f"no flavor route {req.path}")
        return Reply(200, {"flavor": self._flavor_view(flavor)})

    def _since(self, version: str) -> bool:
        have = tuple(int(p) for p in self.max_microversion.split("."))
        return have >= tuple(int(p) for p in version.split("."))

    def _flavor_view(self, flavor: JSON) -> JSON:
        view = copy.deepcopy(flavor)
        if not self._since("2.61") and "vcpus" in view:
            view.pop("extra_specs", None)
        return view

    def _flavor(self, ref: str) -> JSON:
        ref = ref.rstrip("/").rsplit("/", 1)[-1]  # an id or a link
        for flavor in self.flavors:
            if flavor["id"] == ref:
                return flavor
        raise NovaError(404, f"Flavor {ref} could not be found.")

    def _keypairs(self, rest: list[str]) -> Reply:
        if not rest:
            pairs = [{"keypair": self._keypair(n)} for n in self.keypairs]
            return Reply(200, {"keypairs": pairs})
        if rest[0] not in self.keypairs:
            raise NovaError(404, f"Keypair {rest[0]} not found for user {self.user_id}")
        return Reply(200, {"keypair": self._keypair(rest[0])})

    def _keypair(self, name: str) -> JSON:
        return {"name": name, "public_key": self.keypairs[name], "type": "ssh", "user_id": ""}

    def _servers(self, req: Req, rest: list[str]) -> Reply:
        if rest in ([], ["detail"]) and req.method == "GET":
            return self._list_servers(req, detail=rest == ["detail"])
        if rest == [] and req.method == "POST":
            return self._create_server(req.json())
        if len(rest) == 1 and req.method == "GET":
            return Reply(200, {"server": self._view(self._server_by_id(rest[0]))})
        if len(rest) == 1 and req.method == "DELETE":
            self._server_by_id(rest[0])
            del self.state.servers[rest[0]]
            self.server_groups.leave(rest[0])
            for port in self.state.ports.values():  # a user's port is detached, not deleted
                if port["device_id"] == rest[0]:
                    port["device_id"], port["device_owner"] = "", ""
            return Reply(204, None)
        if len(rest) == 1 and req.method == "PUT":  # rename: allowed in any state
            server = self._server_by_id(rest[0])
            name = (req.json().get("server") or {}).get("name")
            if isinstance(name, str) and name:
                server["name"] = name
            return Reply(200, {"server": self._view(server)})
        if len(rest) == 2 and rest[1] == "metadata" and req.method == "GET":
            return Reply(200, {"metadata": dict(self._server_by_id(rest[0])["metadata"])})
        if len(rest) == 2 and rest[1] == "metadata" and req.method == "POST":
            server = self._server_by_id(rest[0])
            if server["status"] == "BUILD":
                raise NovaError(409, multicreate.metadata_refused(server["id"]))
            update = req.json().get("metadata")
            if not isinstance(update, dict):
                raise NovaError(400, "Invalid input for field/attribute metadata.")
            server["metadata"].update({str(k): str(v) for k, v in update.items()})
            return Reply(200, {"metadata": dict(server["metadata"])})
        raise NovaError(404, f"no servers route {req.method} {req.path}")

    def _server_by_id(self, server_id: str) -> JSON:
        server = self.state.servers.get(server_id)
        if server is None:
            raise NovaError(404, f"Instance {server_id} could not be found.")
        return server

    def _list_servers(self, req: Req, detail: bool) -> Reply:
        items = list(self.state.servers.values())
        name = req.query.get("name")
        if name:
            items = [s for s in items if re.search(name, s["name"])]
        if req.query.get("reservation_id"):
            items = [s for s in items if s.get("reservation_id") == req.query["reservation_id"]]
        if req.query.get("status"):
            items = [s for s in items if s["status"] == req.query["status"].upper()]
        marker = req.query.get("marker")
        if marker:
            ids = [s["id"] for s in items]
            if marker not in ids:
                raise NovaError(400, f"marker [{marker}] not found")
            items = items[ids.index(marker) + 1 :]
        limit = min(int(req.query.get("limit", self.page_size)), self.page_size)
        page = items[:limit]
        body: JSON = {
            "servers": [
                self._view(s, listing=True) if detail else _brief(s, self.url) for s in page
            ]
        }
        if page and len(page) == limit:
            query = {k: v for k, v in req.query.items() if k != "marker"}
            query.update(limit=str(limit), marker=page[-1]["id"])
            href = f"{self.url}{req.path}?{urlencode(query)}"
            body["servers_links"] = [{"rel": "next", "href": href}]
        return Reply(200, body)

    def _create_server(self, body: JSON) -> Reply:
        spec = body.get("server")
        if not isinstance(spec, dict) or not spec.get("name"):
            raise NovaError(400, "Invalid input for field/attribute server.")
        flavor = self._create_flavor(spec)
        volumes = self._boot_volumes(spec)
        image_id = str(spec.get("imageRef") or "")
        if not volumes and image_id not in self.images.values():
            raise NovaError(400, f"Can not find requested image {image_id}")
        networks = self._create_networks(spec.get("networks"))
        key_name = spec.get("key_name")
        if key_name is not None and key_name not in self.keypairs:
            raise NovaError(400, "Invalid key_name provided.")
        made = self._count_allowed(spec)
        asked = spec.get("networks")
        ports = [str(n["port"]) for n in asked if "port" in n] if isinstance(asked, list) else []
        if ports and made > 1:  # nova/compute/api.py _check_requested_networks
            raise NovaError(400, MULTIPLE_WITH_PORT)
        self._check_port_quota(len(networks) * (0 if ports else 1))
        reservation = multicreate.reservation_id()
        fates = self._fates(str(flavor.get("name", "")), made)
        fates = [self._address_for(fate, networks) for fate in fates]
        hints = body.get("os:scheduler_hints") or body.get("OS-SCH-HNT:scheduler_hints")
        servers = []
        for index, fate in enumerate(fates):
            server = self._new_server(spec, flavor, image_id, networks, fate)
            server["name"] = multicreate.name_of(str(spec["name"]), made, index)
            server["reservation_id"] = reservation
            try:
                self.server_groups.join(hints, server["id"])
            except BadRequest as exc:
                raise NovaError(400, str(exc)) from None
            servers.append(server)
        for port in ports:
            self.state.ports[port]["device_id"] = servers[0]["id"]
            self.state.ports[port]["device_owner"] = "compute:nova"
        for server in servers:
            server["block_device_mapping_v2"] = volumes
            server["volumes"] = [str(uuid.uuid4()) for _ in volumes]
            self.state.servers[server["id"]] = server
        if spec.get("return_reservation_id") is True:
            return Reply(202, {"reservation_id": reservation})
        server = servers[0]  # servers.py create: the first server of the request
        reply = {
            "id": server["id"],
            "links": _links(self.url, server["id"]),
            "OS-DCF:diskConfig": "MANUAL",
            "security_groups": server["security_groups"],
            "adminPass": secrets.token_urlsafe(9),
        }
        return Reply(202, {"server": reply}, {"Location": reply["links"][0]["href"]})

    def _boot_volumes(self, spec: JSON) -> list[JSON]:
        """block_device_mapping_v2 as Nova checks it for booting from a new volume: without
        imageRef, one boot_index 0 entry made from a known image, with a volume_size."""
        mappings = spec.get("block_device_mapping_v2") or []
        if not isinstance(mappings, list):
            raise NovaError(400, "Invalid input for field/attribute block_device_mapping_v2.")
        for bdm in mappings:
            if bdm.get("source_type") == "image" and bdm.get("uuid") not in self.images.values():
                raise NovaError(400, f"Can not find requested image {bdm.get('uuid')}")
            if bdm.get("destination_type") == "volume" and bdm.get("source_type") == "image":
                size = bdm.get("volume_size")
                if not isinstance(size, int) or size < 1:
                    raise NovaError(
                        400,
                        "Images with destination_type 'volume' need to have a "
                        "non-zero size specified",
                    )
        boots = [b for b in mappings if str(b.get("boot_index")) == "0"]
        if mappings and not spec.get("imageRef") and not boots:
            raise NovaError(
                400,
                "Block Device Mapping is Invalid: Boot sequence for the "
                "instance and image/block device mapping combination is not valid.",
            )
        return [dict(b) for b in mappings]

    def _create_flavor(self, spec: JSON) -> JSON:
        try:
            return self._flavor(str(spec.get("flavorRef") or ""))
        except NovaError:
            raise NovaError(400, f"Flavor {spec.get('flavorRef')} could not be found.") from None

    def _create_networks(self, networks: Any) -> list[str]:
        if networks in ("auto", None):
            return list(self.networks)[:1]
        if networks == "none":
            return []
        names = {v: k for k, v in self.networks.items()}
        found = []
        for net in networks if isinstance(networks, list) else []:
            if "port" in net:  # Nova "Create server": networks[].port, a port the user made
                port = self.state.ports.get(str(net["port"]))
                if port is None:
                    raise NovaError(400, f"Port {net['port']} could not be found.")
                if port["device_id"]:
                    raise NovaError(409, f"Port {net['port']} is still in use.")
                found.append(names[port["network_id"]])
                continue
            if net.get("uuid") not in names:
                raise NovaError(400, f"Network {net.get('uuid')} could not be found.")
            found.append(names[net["uuid"]])
        return found

    def _count_allowed(self, spec: JSON) -> int:
        """How many servers this create makes: max_count, cut to the quota; 403 when not even
        min_count fit (tests/fakes/openstack_multicreate.py)."""
        try:
            wanted = multicreate.counts(spec)
        except multicreate.CountError as exc:
            raise NovaError(400, str(exc)) from None
        quota, used = self.state.quota_instances, len(self.state.servers)
        made = wanted.allowed(None if quota is None else quota - used)
        if made is None:
            limit = quota if quota is not None else used
            message = QUOTA_MESSAGE.format(used=used, limit=limit) + " instances"
            raise NovaError(403, message.replace("Requested 1", f"Requested {wanted.least}"))
        return made

    def _ports_used(self) -> int:
        """Ports of the project: its own, and one per network of each server not deleted."""
        servers = sum(len(s.get("addresses") or {}) for s in self.state.servers.values())
        return len(self.state.ports) + servers

    def _check_port_quota(self, wanted: int) -> None:
        quota = self.state.port_quota
        if wanted and quota is not None and self._ports_used() + wanted > quota:
            raise NovaError(403, PORT_LIMIT_MESSAGE)

    def _address_for(self, fate: str, networks: list[str]) -> str:
        """An ACTIVE-bound server takes an address; none left: NoMoreFixedIps."""
        if fate != "ACTIVE" or not networks or self.state.free_addresses is None:
            return fate
        if self.state.free_addresses <= 0:
            return "ERROR:no-fixed-ip"
        self.state.free_addresses -= 1
        return fate

    def _fates(self, flavor: str, count: int) -> list[str]:
        """Each server's fate; a request that does not fit whole is NoValidHost for all its
        servers (the scheduler schedules it whole: tests/fakes/openstack_multicreate.py)."""
        if count == 1:
            return [self._fate(flavor)]
        state = self.state
        if state.capacity_faults > 0:
            state.capacity_faults -= 1
            return ["ERROR"] * count
        limits = [n for n in (state.capacity, state.flavor_capacity.get(flavor)) if n is not None]
        if limits and min(limits) < count:
            return ["ERROR"] * count
        return [self._fate(flavor) for _ in range(count)]

    def _new_server(
        self, spec: JSON, flavor: JSON, image_id: str, networks: list[str], fate: str
    ) -> JSON:
        if spec.get("user_data"):
            base64.b64decode(spec["user_data"], validate=True)  # Nova insists on base64
        now = datetime.now(UTC)
        addresses = {net: [self._address()] for net in networks}
        return {
            "id": str(uuid.uuid4()),
            "name": spec["name"],
            "status": "BUILD",
            "metadata": {str(k): str(v) for k, v in (spec.get("metadata") or {}).items()},
            "flavor": flavor,
            "image": image_id,
            "key_name": spec.get("key_name"),
            "security_groups": [
                {"name": g.get("name", "default")} for g in spec.get("security_groups") or []
            ]
            or [{"name": "default"}],
            "availability_zone": spec.get("availability_zone") or "nova",
            "user_data": spec.get("user_data"),
            "addresses": addresses,
            "created": _iso(now),
            "launched_at": None,
            "fault": None,
            "_views": 0,
            "_fate": fate,
        }

    def _fate(self, flavor: str) -> str:
        """ACTIVE, or ERROR when capacity is out or a build fault was injected (decided at
        creation, shown after a poll): "ERROR" (No valid host) or "ERROR:<kind>"."""
        if self.state.build_faults:
            return "ERROR:" + self.state.build_faults.pop(0)
        if self.state.capacity_faults > 0:
            self.state.capacity_faults -= 1
            return "ERROR"
        sized = self.state.flavor_capacity.get(flavor)
        if (self.state.capacity is not None and self.state.capacity <= 0) or sized == 0:
            return "ERROR"
        if self.state.capacity is not None:
            self.state.capacity -= 1
        if sized is not None:
            self.state.flavor_capacity[flavor] = sized - 1
        return "ACTIVE"

    def _address(self) -> JSON:
        n = self.state.next_address
        self.state.next_address += 1
        return {
            "version": 4,
            "addr": f"10.20.{n // 250}.{n % 250 + 2}",
            "OS-EXT-IPS:type": "fixed",
            "OS-EXT-IPS-MAC:mac_addr": f"fa:16:3e:00:{n // 256:02x}:{n % 256:02x}",
        }

    def _view(self, server: JSON, listing: bool = False) -> JSON:
        """The server as Nova 2.93 shows it; each read moves a BUILD server towards its fate."""
        server["_views"] += 1
        if server["status"] == "BUILD" and server["_views"] > self.build_polls:
            fate, _, fault = server["_fate"].partition(":")
            server["status"] = fate
            if server["status"] == "ACTIVE":
                server["launched_at"] = _iso(datetime.now(UTC), micro=True)
            else:
                server["addresses"] = {}
                code, message = self._fault(fault, server)
                server["fault"] = {
                    "code": code,
                    "created": _iso(datetime.now(UTC)),
                    "message": message,
                }
        status = server["status"]
        flavor = server["flavor"]
        view: JSON = {
            "id": server["id"],
            "name": server["name"],
            "status": status,
            "tenant_id": self.project_id,
            "user_id": self.user_id,
            "metadata": dict(server["metadata"]),
            "hostId": "" if status != "ACTIVE" else uuid.uuid5(uuid.NAMESPACE_DNS, "h1").hex,
            "image": {"id": server["image"], "links": []},
            "flavor": self._server_flavor(flavor),
            "created": server["created"],
            "updated": server["created"],
            "addresses": copy.deepcopy(server["addresses"]),
            "accessIPv4": "",
            "accessIPv6": "",
            "links": _links(self.url, server["id"]),
            "OS-DCF:diskConfig": "MANUAL",
            "progress": 0,
            "OS-EXT-AZ:availability_zone": server["availability_zone"],
            "config_drive": "",
            "key_name": server["key_name"],
            "OS-SRV-USG:launched_at": server["launched_at"],
            "OS-SRV-USG:terminated_at": None,
            "security_groups": copy.deepcopy(server["security_groups"]),
            "OS-EXT-STS:task_state": "spawning" if status == "BUILD" else None,
            "OS-EXT-STS:vm_state": {"BUILD": "building"}.get(status, status.lower()),
            "OS-EXT-STS:power_state": 1 if status == "ACTIVE" else 0,
            "os-extended-volumes:volumes_attached": [
                {"id": vid, "delete_on_termination": True} for vid in server.get("volumes", [])
            ],
            "locked": False,
            "locked_reason": None,
            "description": None,
            "tags": [],
            "trusted_image_certificates": None,
            "server_groups": [],
        }
        # a server no host took lives in cell0, and Nova's listing leaves its fault out
        # (seen against Debian 12's nova 26.2.2 in tests/realnova); GET /servers/{id} has it
        in_cell0 = str((server["fault"] or {}).get("message", "")).startswith("No valid host")
        if server["fault"] and not (listing and in_cell0):
            view["fault"] = dict(server["fault"])
        return view

    def _fault(self, kind: str, server: JSON) -> tuple[int, str]:
        """A server fault's code and message (nova/compute/utils.py exception_to_dict)."""
        uuid_ = server["id"]
        if kind == "broken-image":
            why = "Image has no associated data"
            return 500, BUILD_ABORTED.format(uuid=uuid_, image=server["image"], why=why)
        if kind == "retries":
            return 500, MAX_RETRIES.format(uuid=uuid_)
        if kind == "no-fixed-ip":
            net = next(iter(self.networks.values()), "")
            return 500, NO_FIXED_IP.format(uuid=uuid_, net=net)
        if kind == "quota-recheck":
            used = len(self.state.servers)
            return 413, QUOTA_MESSAGE.format(used=used, limit=used) + " instances"
        return 500, NO_VALID_HOST

    def _server_flavor(self, flavor: JSON) -> JSON:
        if not self._since("2.47"):
            link = f"{self.url}/compute/flavors/{flavor['id']}"
            return {"id": flavor["id"], "links": [{"rel": "bookmark", "href": link}]}
        return {
            "vcpus": flavor["vcpus"],
            "ram": flavor["ram"],
            "disk": flavor["disk"],
            "ephemeral": 0,
            "swap": 0,
            "original_name": flavor["name"],
            "extra_specs": dict(flavor["extra_specs"]),
        }

    # Neutron -----------------------------------------------------------------

    def _ports(self, req: Req, rest: list[str]) -> Reply:
        """Neutron ports (Networking API v2.0 reference, Ports): create (POST /v2.0/ports,
        201), list filtered by name and network_id, delete (204; 404 when unknown)."""
        ports = self.state.ports
        if req.method == "POST" and not rest:
            body = req.json().get("port")
            if not isinstance(body, dict) or body.get("network_id") not in self.networks.values():
                raise NovaError(
                    404, f"Network {(body or {}).get('network_id')} could not be found."
                )
            if self.state.port_quota is not None and self._ports_used() >= self.state.port_quota:
                raise NeutronError(409, "OverQuota", "Quota exceeded for resources: ['port'].")
            if self.state.free_addresses is not None:
                if self.state.free_addresses <= 0:
                    message = f"No more IP addresses available on network {body['network_id']}."
                    raise NeutronError(409, "IpAddressGenerationFailure", message)
                self.state.free_addresses -= 1
            port = _port(body, self.project_id)
            ports[port["id"]] = port
            return Reply(201, {"port": port})
        if req.method == "GET" and not rest:
            found = list(ports.values())
            for key in ("name", "network_id", "device_id"):
                if key in req.query:
                    found = [p for p in found if p[key] == req.query[key]]
            return Reply(200, {"ports": copy.deepcopy(found)})
        if len(rest) == 1 and rest[0] in ports:
            if req.method == "GET":
                return Reply(200, {"port": copy.deepcopy(ports[rest[0]])})
            if req.method == "DELETE":
                del ports[rest[0]]
                return Reply(204, None)
        raise NovaError(404, f"Port {'/'.join(rest)} could not be found.")

    def port_list(self) -> list[JSON]:
        with self.lock:
            return copy.deepcopy(list(self.state.ports.values()))

    def _neutron(self, req: Req) -> Reply:
        rest = req.segs[2:]  # after /networking/v2.0
        if rest and rest[0] == "ports":
            return self._ports(req, rest[1:])
        if req.method != "GET" or not rest or rest[0] != "networks":
            raise NovaError(404, f"no network route {req.path}")
        nets = [_network(name, nid, self.project_id) for name, nid in self.networks.items()]
        if len(rest) == 2:
            found = [n for n in nets if n["id"] == rest[1]]
            if not found:
                raise NovaError(404, f"Network {rest[1]} could not be found.")
            return Reply(200, {"network": found[0]})
        for key in ("name", "id"):
            if key in req.query:
                nets = [n for n in nets if n[key] == req.query[key]]
        return Reply(200, {"networks": nets})


def _port(body: JSON, project_id: str) -> JSON:
    """A port as Neutron's "Create port" answers it (Networking API v2.0 reference, Ports):
    the fields openstacksdk's Port reads, `binding:vnic_type` as asked (default normal)."""
    return {
        "id": str(uuid.uuid4()),
        "name": str(body.get("name") or ""),
        "network_id": str(body["network_id"]),
        "binding:vnic_type": str(body.get("binding:vnic_type") or "normal"),
        "device_id": "",
        "device_owner": "",
        "status": "DOWN",
        "admin_state_up": True,
        "fixed_ips": [],
        "tenant_id": project_id,
        "project_id": project_id,
    }


def _iso(when: datetime, micro: bool = False) -> str:
    if micro:
        return when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _links(url: str, server_id: str) -> list[JSON]:
    return [
        {"rel": "self", "href": f"{url}/compute/v2.1/servers/{server_id}"},
        {"rel": "bookmark", "href": f"{url}/compute/servers/{server_id}"},
    ]


def _brief(server: JSON, url: str) -> JSON:
    return {"id": server["id"], "name": server["name"], "links": _links(url, server["id"])}


def _network(name: str, net_id: str, project_id: str) -> JSON:
    return {
        "id": net_id,
        "name": name,
        "status": "ACTIVE",
        "admin_state_up": True,
        "shared": False,
        "subnets": [],
        "tenant_id": project_id,
        "project_id": project_id,
        "router:external": False,
        "mtu": 1450,
        "tags": [],
    }


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[FakeOpenStack]:
    with http_fake.running(FakeOpenStack, **kwargs) as fake:
        yield fake


def remote_control(url: str, method: str, **kwargs: Any) -> JSON:
    """Call a CONTROL_METHODS method of a fake in another process (url: its `info()["url"]`)."""
    answer = requests.post(f"{url}/_fake/{method}", json=kwargs, timeout=10)
    answer.raise_for_status()
    result: JSON = answer.json()
    return result


def main() -> None:
    """Serve until SIGTERM/SIGINT; write clouds.yaml (argv[1], if given) and print the
    connection details as one JSON line first."""
    fake = FakeOpenStack()

    def clouds_yaml(info: JSON) -> None:
        if len(sys.argv) > 1:
            info["clouds_yaml"] = str(fake.write_clouds_yaml(Path(sys.argv[1])))
            info["cloud"] = CLOUD_NAME

    http_fake.serve_until_signalled(fake, clouds_yaml)


if __name__ == "__main__":
    main()

"""A small fake of Azure Resource Manager (plus an AAD token endpoint) over HTTPS on 127.0.0.1.

It answers what azure-mgmt-compute / azure-mgmt-network / azure-identity actually call for
clustermgr: virtual machines (PUT and DELETE as long-running operations polled through
`Azure-AsyncOperation`, GET, list with `nextLink` paging), network interfaces, disks, resource
SKUs, managed / gallery / marketplace images, and the client-credentials token flow
(`ClientSecretCredential(authority="https://127.0.0.1:PORT", disable_instance_discovery=True)`).
The api-version is never checked.

Its answers have the shapes the real service sends, each with where it was seen: the
refusals and the SKU listing in tests/fakes/azure_answers.py, the NIC reservation and the
listings' instance views where they are answered here.

Faults are injected from the test process through thread-safe methods (`fail_next`,
`fail_next_vm_puts`, `limit_capacity`, `slow`, `hold_next`: tests/fakes/gate.py), or from
another process by POSTing JSON to `/_fake/<method>` (see CONTROL_METHODS).
`python -m tests.fakes.azure_fake` runs one until SIGTERM and prints its connection details
as one JSON line, for end-to-end tests where the provider lives in a separate daemon process
(give that process REQUESTS_CA_BUNDLE=ca_bundle).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import secrets
import ssl
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import trustme

from tests.fakes import http_fake
from tests.fakes.azure_answers import (
    DEFAULT_SKUS,
    LOCATION,
    QUOTA_REFUSAL,
    SHAPES,
    SUBSCRIPTION,
)
from tests.fakes.azure_gallery import Galleries
from tests.fakes.azure_placement import group_json as ppg_json
from tests.fakes.azure_placement import members as ppg_members
from tests.fakes.azure_reservations import FakeGroup, FakeMember, group_json, group_of, member_json
from tests.fakes.http_fake import JSON, HttpFake, Reply, Req

TENANT = "00000000-0000-0000-0000-0000000000bb"
CLIENT_ID = "00000000-0000-0000-0000-0000000000cc"
RESOURCE_GROUP = "rg-burst"
MARKETPLACE_IMAGE = "Canonical:ubuntu-24_04-lts:server:latest"


# Which CONTROL endpoint names map to which public methods (for a fake in another process).
CONTROL_METHODS = (
    "fail_next",
    "fail_next_vm_puts",
    "limit_capacity",
    "limit_cores",
    "slow",
    "clear_faults",
    "set_power_state",
    "evict",
)


@dataclass
class Fault:
    """Answer the next `remaining` matching requests with an ARM error instead."""

    method: str
    path_contains: str
    status: int
    code: str
    message: str
    remaining: int
    in_operation: bool = False  # accept the PUT, then fail its async operation (VM left Failed)
    retry_after: str | None = None
    extra: JSON | None = None  # more of the ARM error object: details, additionalInfo

    def matches(self, method: str, path: str) -> bool:
        return self.remaining > 0 and method == self.method and self.path_contains in path


@dataclass
class Operation:
    """One async operation: answers InProgress `polls_left` times, then its final status."""

    polls_left: int
    error: JSON | None = None
    finish: Any = None  # callable run once (under the lock) when the operation completes
    done: bool = False


@dataclass
class Slowness:
    seconds: float
    remaining: int | None
    path_contains: str = ""


@dataclass
class FakeState:
    vms: dict[str, JSON] = field(default_factory=dict)
    nics: dict[str, JSON] = field(default_factory=dict)
    disks: dict[str, JSON] = field(default_factory=dict)
    operations: dict[str, Operation] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)
    faults: list[Fault] = field(default_factory=list)
    slowness: list[Slowness] = field(default_factory=list)
    capacity: int | None = None
    size_capacity: dict[str, int] = field(default_factory=dict)  # by lower-cased VM size
    # cores quotas: by VM family (lower-cased), and the regional total under "" (None: none)
    core_quotas: dict[str, int] = field(default_factory=dict)
    next_ip: int = 4
    # NIC (lower-cased) -> (the VM it is reserved for, monotonic time the reservation ends)
    reserved_nics: dict[str, tuple[str, float]] = field(default_factory=dict)
    groups: dict[str, FakeGroup] = field(default_factory=dict)  # capacity reservation groups
    ppgs: dict[str, JSON] = field(default_factory=dict)  # proximity placement groups


class ArmError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        retry_after: str | None = None,
        extra: JSON | None = None,
    ):
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after
        self.extra = extra or {}  # more of the ARM error object: details, additionalInfo

    def body(self) -> JSON:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


class FakeAzure(HttpFake):
    """The fake cloud. Start with `start()` (or `with FakeAzure() as fake:`), stop with `stop()`."""

    thread_name = "azure-fake"
    control_methods = CONTROL_METHODS
    content_type = "application/json; charset=utf-8"
    held_body: ClassVar[JSON] = {"error": {"code": "ServiceUnavailable", "message": "held"}}
    paths_ignore_case = True

    def __init__(
        self,
        *,
        page_size: int = 2,
        lro_polls: int = 1,
        skus: list[JSON] | None = None,
        honor_delete_options: bool = True,
        client_secret: str | None = None,
        nic_reservation_s: float = 180.0,
    ) -> None:
        super().__init__()
        # the account: the service principal, its subscription and resource group
        self.subscription_id, self.tenant_id, self.client_id = SUBSCRIPTION, TENANT, CLIENT_ID
        self.client_secret = client_secret or "fake-secret-" + secrets.token_hex(8)
        self.resource_group, self.location = RESOURCE_GROUP, LOCATION
        self.page_size, self.lro_polls = page_size, lro_polls
        self.honor_delete_options = honor_delete_options
        self.nic_reservation_s = nic_reservation_s
        self.skus = copy.deepcopy(skus if skus is not None else DEFAULT_SKUS)
        self.vnet_subnet = (
            f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}"
            "/providers/Microsoft.Network/virtualNetworks/vnet-burst/subnets/compute"
        )
        self.managed_images = {"img-compute"}
        self.galleries = Galleries(LOCATION)  # gallery image versions and their regions
        self.galleries.add("gal", "compute", "1.0.0", [LOCATION])
        self.ssh_keys = {"burst-key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFake burst"}
        self.marketplace = {("canonical", "ubuntu-24_04-lts", "server"): ["24.04.202501010"]}
        self.state = FakeState()
        self._pending_failure: Fault | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="azure-fake-")
        self.ca_bundle = ""

    # ----------------------------------------------------------------- the server's part

    def tls_context(self) -> ssl.SSLContext:
        """HTTPS with a certificate for 127.0.0.1 from a CA of its own (`ca_bundle`): the
        url is both the ARM endpoint (ProviderSettings.endpoint_url) and the AAD authority."""
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        bundle = Path(self._tmp.name) / "ca.pem"
        ca.cert_pem.write_to_path(str(bundle))
        self.ca_bundle = str(bundle)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert.configure_cert(context)
        return context

    def cleanup(self) -> None:
        self._tmp.cleanup()

    def reply_headers(self, path: str) -> dict[str, str]:
        return {"x-ms-request-id": str(uuid.uuid4())}

    def error(self, status: int, message: str) -> ArmError:
        return ArmError(status, "NotFound" if status == 404 else "BadRequest", message)

    def info(self) -> JSON:
        account = ("subscription_id", "resource_group", "tenant_id", "client_id", "client_secret")
        return {
            "url": self.url,
            "authority_host": self.url,
            "ca_bundle": self.ca_bundle,
            **{key: getattr(self, key) for key in account},
            "region": self.location,
            "subnet": self.vnet_subnet,
            "image": MARKETPLACE_IMAGE,
        }

    # ----------------------------------------------------------------- fault injection

    def fail_next(
        self,
        method: str,
        path_contains: str,
        status: int,
        code: str,
        attempts: int = 1,
        message: str = "",
        in_operation: bool = False,
        retry_after: str | None = None,
        extra: JSON | None = None,
    ) -> None:
        """Fail the next `attempts` requests of `method` whose lower-cased path contains
        `path_contains` (e.g. "/virtualmachines/") with an ARM error (`extra`: more fields of
        its error object)."""
        fault = Fault(
            method.upper(),
            path_contains.lower(),
            status,
            code,
            message or f"injected {code}",
            attempts,
            in_operation,
            retry_after,
            extra,
        )
        with self.lock:
            self.state.faults.append(fault)

    def fail_next_vm_puts(
        self,
        code: str,
        attempts: int = 1,
        status: int | None = None,
        retry_after: str | None = "0.05",
    ) -> None:
        """Fail VM creations the way Azure signals `code` (the shapes in SHAPES, each with
        where it was seen):

        AllocationFailed / ZonalAllocationFailed / Overconstrained*: accepted, then the
        async operation fails (the VM is left in provisioningState Failed); the same wrapped
        in ResourceOperationFailure: "Wrapped" + the code; SkuNotAvailable, Conflict: 409
        on the PUT; OperationNotAllowed (Total Regional Cores), FamilyCoresQuota,
        LowPriorityCores: 409 OperationNotAllowed naming the quota; TooManyRequests: 429
        OperationNotAllowed with TooManyRequests in details[] (Retry-After `retry_after`,
        None for none, as Compute often sends); SubscriptionRequestsThrottled: ARM's 429.
        """
        shape = SHAPES[code]
        in_operation = shape.status == 200
        self.fail_next(
            "PUT",
            "/providers/microsoft.compute/virtualmachines/",
            status or shape.status,
            shape.code,
            attempts,
            message=shape.message,
            in_operation=in_operation,
            retry_after=retry_after if shape.status == 429 else None,
            extra=copy.deepcopy(shape.extra),
        )

    def limit_capacity(self, instances: int | None, instance_type: str | None = None) -> None:
        """Only `instances` more VMs (of size `instance_type`, when named) can be allocated,
        then the operation fails with ResourceOperationFailure wrapping AllocationFailed
        (None: no limit)."""
        with self.lock:
            if instance_type is None:
                self.state.capacity = instances
            elif instances is None:
                self.state.size_capacity.pop(instance_type.lower(), None)
            else:
                self.state.size_capacity[instance_type.lower()] = instances

    def limit_cores(self, cores: int | None, family: str = "") -> None:
        """A cores quota: of one VM family (its SKUs' `family`), or the regional total when
        `family` is "" (None: no quota). A VM PUT that would go over it is 409
        OperationNotAllowed naming the quota ("... approved standardDSv3Family Cores quota",
        "... approved Total Regional Cores quota"), as Compute refuses it."""
        with self.lock:
            if cores is None:
                self.state.core_quotas.pop(family.lower(), None)
            else:
                self.state.core_quotas[family.lower()] = cores

    def slow(self, seconds: float, attempts: int | None = None, path_contains: str = "") -> None:
        """Delay the next `attempts` matching answers (all of them when None) by `seconds`."""
        with self.lock:
            self.state.slowness.append(Slowness(seconds, attempts, path_contains.lower()))

    def clear_faults(self) -> None:
        with self.lock:
            self.state.faults.clear()
            self.state.slowness.clear()
            self.state.capacity = None
            self.state.size_capacity.clear()
            self.state.core_quotas.clear()

    def set_power_state(self, vm_name: str, power: str) -> None:
        with self.lock:
            self.state.vms[vm_name.lower()]["_power"] = power

    def evict(self, vm_name: str) -> None:
        """A spot eviction with eviction policy Delete: the VM and its deletables vanish."""
        with self.lock:
            vm = self.state.vms.pop(vm_name.lower(), None)
            if vm is not None:
                self._delete_attached(vm)

    # ----------------------------------------------------------------- inspection

    def vm_names(self) -> list[str]:
        with self.lock:
            return sorted(vm["name"] for vm in self.state.vms.values())

    def vm(self, name: str) -> JSON:
        with self.lock:
            return copy.deepcopy(self.state.vms[name.lower()])

    def nic(self, name: str) -> JSON:
        with self.lock:
            return copy.deepcopy(self.state.nics[name.lower()])

    def nic_names(self) -> list[str]:
        with self.lock:
            return sorted(nic["name"] for nic in self.state.nics.values())

    def disk_names(self) -> list[str]:
        with self.lock:
            return sorted(disk["name"] for disk in self.state.disks.values())

    # ----------------------------------------------------------------- request handling

    def serve(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Reply:
        parts = urlsplit(raw_path)
        path = unquote(parts.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        with self.lock:
            self.record(method, path)
            delay = self._delay_for(path.lower())
        if delay:
            time.sleep(delay)
        try:
            if path.startswith(http_fake.CONTROL_PREFIX):
                return self.control(path.removeprefix(http_fake.CONTROL_PREFIX), body)
            if "/oauth2/" in path or "/.well-known/" in path:
                return self._aad(method, path, body)
            self._authorize(headers)
            with self.lock:
                self._inject(method, path.lower())
                return self._route(method, path, query, body)
        except ArmError as err:
            extra = {"Retry-After": err.retry_after} if err.retry_after else {}
            return Reply(err.status, err.body(), extra)

    def _delay_for(self, path: str) -> float:
        for slow in self.state.slowness:
            if slow.path_contains in path and (slow.remaining is None or slow.remaining > 0):
                if slow.remaining is not None:
                    slow.remaining -= 1
                return slow.seconds
        return 0.0

    # AAD --------------------------------------------------------------------

    def _aad(self, method: str, path: str, body: bytes) -> Reply:
        tenant = path.strip("/").split("/")[0]
        if path.endswith("/.well-known/openid-configuration"):
            base = f"{self.url}/{tenant}"
            return Reply(
                200,
                {
                    "token_endpoint": f"{base}/oauth2/v2.0/token",
                    "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                    "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                    "issuer": f"{base}/v2.0",
                    "tenant_region_scope": "NA",
                },
            )
        if method != "POST" or not path.endswith("/token"):
            return Reply(404, {"error": "not_found", "error_description": path})
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        if tenant != self.tenant_id:
            return _aad_error(400, "invalid_request", 90002, f"Tenant '{tenant}' not found.")
        if form.get("client_id") != self.client_id:
            return _aad_error(400, "unauthorized_client", 700016, "Application not found.")
        if form.get("client_secret") != self.client_secret:
            return _aad_error(401, "invalid_client", 7000215, "Invalid client secret provided.")
        token = "fake-token-" + secrets.token_hex(12)
        with self.lock:
            self.state.tokens.add(token)
        return Reply(
            200,
            {
                "token_type": "Bearer",
                "expires_in": 3599,
                "ext_expires_in": 3599,
                "access_token": token,
            },
        )

    def _authorize(self, headers: dict[str, str]) -> None:
        auth = headers.get("authorization", "")
        with self.lock:
            known = auth.startswith("Bearer ") and auth.removeprefix("Bearer ") in self.state.tokens
        if not known:
            raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")

    def _inject(self, method: str, path: str) -> None:
        for fault in self.state.faults:
            if fault.matches(method, path):
                fault.remaining -= 1
                if fault.in_operation:
                    self._pending_failure = fault
                    return
                raise ArmError(
                    fault.status, fault.code, fault.message, fault.retry_after, fault.extra
                )
        self._pending_failure = None

    # ARM routing ---------------------------------------------------------------

    def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> Reply:
        segs = [s for s in path.split("/") if s]
        low = [s.lower() for s in segs]
        if len(low) < 2 or low[0] != "subscriptions" or low[1] != self.subscription_id:
            raise ArmError(404, "SubscriptionNotFound", f"subscription {segs[1:2]} not found")
        if low[2:5] == ["providers", "microsoft.compute", "skus"]:
            return self._page(path, query, [s for s in self.skus if _sku_in(s, query)])
        if low[2:] == ["providers", "microsoft.compute", "virtualmachines"]:
            # VirtualMachines_ListAll: statusOnly=true returns each VM's instance view
            views = [self._vm_view(vm, query) for vm in self.state.vms.values()]
            return self._page(path, query, views)
        if low[2:4] == ["providers", "microsoft.compute"] and "operations" in low:
            return self._poll(segs[-1])
        if low[2:4] == ["providers", "microsoft.compute"] and "publishers" in low:
            return self._marketplace(segs)
        if len(low) < 7 or low[2] != "resourcegroups" or low[4] != "providers":
            raise ArmError(404, "NotFound", f"no route for {path}")
        if low[3] != self.resource_group.lower():
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{segs[3]}' not found.")
        kind, rest = f"{low[5]}/{low[6]}", segs[7:]  # the request's segs: what follows
        handler = {
            "microsoft.compute/virtualmachines": self._vms,
            "microsoft.network/networkinterfaces": self._nics,
            "microsoft.compute/disks": self._disks,
            "microsoft.compute/images": self._images,
            "microsoft.compute/galleries": self._galleries,
            "microsoft.compute/sshpublickeys": self._ssh_keys,
            "microsoft.network/virtualnetworks": self._vnets,
            "microsoft.compute/capacityreservationgroups": self._groups,
            "microsoft.compute/proximityplacementgroups": self._ppgs,
        }.get(kind)
        if handler is None:
            raise ArmError(404, "NotFound", f"no route for {path}")
        return handler(Req(method, path, query, rest, body))

    def _rid(self, kind: str, name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/{kind}/{name}"
        )

    def _page(self, path: str, query: dict[str, str], items: list[JSON]) -> Reply:
        start = int(query.get("$skiptoken", "0"))
        page = items[start : start + self.page_size]
        out: JSON = {"value": page}
        if start + self.page_size < len(items):
            params = {**query, "$skiptoken": str(start + self.page_size)}
            out["nextLink"] = f"{self.url}{path}?{urlencode(params)}"
        return Reply(200, out)

    def _operation(self, error: JSON | None, finish: Any, polls: int | None = None) -> str:
        op_id = str(uuid.uuid4())
        self.state.operations[op_id] = Operation(
            self.lro_polls if polls is None else polls, error, finish
        )
        return (
            f"{self.url}/subscriptions/{self.subscription_id}/providers/Microsoft.Compute"
            f"/locations/{self.location}/operations/{op_id}?api-version=2024-07-01"
        )

    def _poll(self, op_id: str) -> Reply:
        op = self.state.operations.get(op_id)
        if op is None:
            raise ArmError(404, "NotFound", f"operation {op_id} not found")
        if op.polls_left > 0:
            op.polls_left -= 1
            return Reply(200, {"name": op_id, "status": "InProgress"})
        if not op.done:
            op.done = True
            if op.finish is not None:
                op.finish()
        if op.error is not None:
            return Reply(200, {"name": op_id, "status": "Failed", "error": op.error})
        return Reply(200, {"name": op_id, "status": "Succeeded"})

    # virtual machines --------------------------------------------------------------

    def _vms(self, req: Req) -> Reply:
        if not req.segs:
            if req.method != "GET":
                raise ArmError(405, "MethodNotAllowed", req.method)
            # $expand=instanceView "can only be specified if a valid $filter option is
            # specified" (VirtualMachines_List in azure-rest-api-specs, the SDK's docstring):
            # without one the listing carries no instance view, as `_vm_view` leaves it out
            query = {k: v for k, v in req.query.items() if k != "$expand" or "$filter" in req.query}
            views = [self._vm_view(vm, query) for vm in self.state.vms.values()]
            return self._page(req.path, req.query, views)
        name = req.segs[0]
        vm = self.state.vms.get(name.lower())
        if req.method == "GET":
            if vm is None:
                raise ArmError(404, "ResourceNotFound", _not_found("virtualMachines", name))
            return Reply(200, self._vm_view(vm, req.query))
        if req.method == "DELETE":
            return self._delete_vm(name, vm)
        if req.method == "PUT":
            return self._put_vm(name, vm, json.loads(req.body))
        raise ArmError(405, "MethodNotAllowed", req.method)

    def _vm_view(self, vm: JSON, query: dict[str, str]) -> JSON:
        view = {k: copy.deepcopy(v) for k, v in vm.items() if not k.startswith("_")}
        props = view["properties"]
        props.get("osProfile", {}).pop("customData", None)
        if query.get("$expand") != "userData":
            props.pop("userData", None)
        if query.get("$expand") == "instanceView" or query.get("statusOnly") == "true":
            state = props["provisioningState"].lower()
            props["instanceView"] = {
                "statuses": [
                    {"code": f"ProvisioningState/{state}", "level": "Info"},
                    {"code": f"PowerState/{vm['_power']}", "level": "Info"},
                ]
            }
        return view

    # capacity reservation groups (tests/fakes/azure_reservations.py) -----------------

    def add_capacity_reservation_group(
        self, name: str, members: dict[str, tuple[str, int]]
    ) -> None:
        """A group whose members (name -> (VM size, instances reserved)) VMs can join."""
        group = FakeGroup(name)
        for member, (size, capacity) in members.items():
            group.members[member.lower()] = FakeMember(member, size, capacity)
        with self.lock:
            self.state.groups[name.lower()] = group

    def _groups(self, req: Req) -> Reply:
        if req.method != "GET" or not req.segs:
            raise ArmError(405, "MethodNotAllowed", req.method)
        group = self.state.groups.get(req.segs[0].lower())
        if group is None:
            raise ArmError(
                404, "ResourceNotFound", _not_found("capacityReservationGroups", req.segs[0])
            )
        rid = self._rid("Microsoft.Compute/capacityReservationGroups", group.name)
        if len(req.segs) == 1:
            return Reply(200, group_json(group, rid))
        if len(req.segs) == 2:
            items = [member_json(m, rid, self.location, False) for m in group.members.values()]
            return self._page(req.path, req.query, items)
        member = group.members.get(req.segs[2].lower())
        if member is None:
            raise ArmError(404, "ResourceNotFound", _not_found("capacityReservations", req.segs[2]))
        view = req.query.get("$expand", "").lower() == "instanceview"
        return Reply(200, member_json(member, rid, self.location, view))

    def _ppgs(self, req: Req) -> Reply:
        """Proximity placement groups (tests/fakes/azure_placement.py)."""
        kind = "Microsoft.Compute/proximityPlacementGroups"
        if not req.segs:
            items = [self._ppg_view(g) for g in self.state.ppgs.values()]
            return self._page(req.path, req.query, items)
        name = req.segs[0]
        found = self.state.ppgs.get(name.lower())
        if req.method == "PUT":
            body = json.loads(req.body)
            made = {"name": name, "location": body.get("location"), "tags": body.get("tags", {})}
            self.state.ppgs[name.lower()] = made
            return Reply(200 if found else 201, self._ppg_view(made))
        if found is None:
            if req.method == "DELETE":
                return Reply(204, None)
            raise ArmError(404, "ResourceNotFound", _not_found("proximityPlacementGroups", name))
        if req.method == "DELETE":
            del self.state.ppgs[name.lower()]
            return Reply(200, None)
        if req.method == "GET":
            return Reply(200, self._ppg_view(found))
        raise ArmError(405, "MethodNotAllowed", f"{req.method} {kind}")

    def _ppg_view(self, group: JSON) -> JSON:
        rid = self._rid("Microsoft.Compute/proximityPlacementGroups", group["name"])
        vms = ppg_members(list(self.state.vms.values()), rid)
        return ppg_json(group["name"], rid, group["location"], group["tags"], vms)

    def ppg_members(self, name: str) -> list[str]:
        """The names of the VMs in a proximity placement group ([] for none or no group)."""
        group = self.state.ppgs.get(name.lower())
        if group is None:
            return []
        return sorted(
            v["id"].rsplit("/", 1)[-1]
            for v in self._ppg_view(group)["properties"]["virtualMachines"]
        )

    def ppg_names(self) -> list[str]:
        return sorted(g["name"] for g in self.state.ppgs.values())

    def _reserve(self, vm_name: str, body: JSON) -> None:
        """Allocate a VM that names a group against the member of its size."""
        name = group_of(body)
        if name is None:
            return
        group = self.state.groups.get(name)
        if group is None:
            raise ArmError(404, "ResourceNotFound", _not_found("capacityReservationGroups", name))
        size = body.get("properties", {}).get("hardwareProfile", {}).get("vmSize", "")
        member = next((m for m in group.members.values() if m.size == size), None)
        if member is None:
            raise ArmError(
                400,
                "InvalidParameter",
                f"Capacity reservation group {group.name} has no capacity reservation of "
                f"VM size {size}.",
            )
        member.vms.append(self._rid("Microsoft.Compute/virtualMachines", vm_name))

    def _release(self, vm_id: str) -> None:
        for group in self.state.groups.values():
            for member in group.members.values():
                member.vms = [v for v in member.vms if v.lower() != vm_id.lower()]

    def _put_vm(self, name: str, vm: JSON | None, body: JSON) -> Reply:
        if vm is not None and vm["properties"]["provisioningState"] not in ("Failed",):
            if vm["properties"]["provisioningState"] == "Deleting":
                raise ArmError(409, "OperationNotAllowed", f"VM {name} is being deleted.")
            return Reply(200, self._vm_view(vm, {}))  # an update: nothing new to create
        self._validate_vm(name, body)
        self._check_cores(str(body["properties"]["hardwareProfile"]["vmSize"]))
        self._reserve(name, body)
        failure = self._pending_failure
        error: JSON | None = None
        if failure is not None:
            error = {"code": failure.code, "message": failure.message, **(failure.extra or {})}
        elif not self._allocate(str(body["properties"]["hardwareProfile"]["vmSize"]).lower()):
            wrapped = SHAPES["WrappedAllocationFailed"]
            error = {"code": wrapped.code, "message": wrapped.message, **wrapped.extra}
        vm = self._new_vm(name, body)
        self.state.vms[name.lower()] = vm
        self._attach_nics(vm)
        finish = self._finish_create(vm, error)
        op_url = self._operation(error, finish)
        return Reply(201, self._vm_view(vm, {}), {"Azure-AsyncOperation": op_url})

    def _cores_of(self, size: str) -> tuple[int, str]:
        """(vCPUs, family) of a size, from the SKU listing."""
        sku = next((s for s in self.skus if s["name"].lower() == size.lower()), None)
        if sku is None:
            return 0, ""
        caps = {c["name"]: c["value"] for c in sku.get("capabilities", [])}
        return int(caps.get("vCPUs", "0")), str(sku.get("family", ""))

    def _check_cores(self, size: str) -> None:
        """409 OperationNotAllowed when the VM would go over a cores quota: its family's
        first, then the regional total (VMs that failed hold no cores)."""
        wanted, family = self._cores_of(size)
        live = [
            vm
            for vm in self.state.vms.values()
            if vm["properties"]["provisioningState"] not in ("Failed", "Deleting")
        ]
        for key, quota in ((family.lower(), f"{family} Cores"), ("", "Total Regional Cores")):
            limit = self.state.core_quotas.get(key)
            if limit is None:
                continue
            used = sum(
                cores
                for cores, fam in (
                    self._cores_of(vm["properties"]["hardwareProfile"]["vmSize"]) for vm in live
                )
                if key == "" or fam.lower() == key
            )
            if used + wanted > limit:
                message = QUOTA_REFUSAL.format(
                    quota=quota, limit=limit, used=used, wanted=wanted, needed=used + wanted
                )
                raise ArmError(409, "OperationNotAllowed", message)

    def _allocate(self, size: str) -> bool:
        """Take one VM of `size` from the capacity left (False: none left)."""
        sized = self.state.size_capacity.get(size)
        if (self.state.capacity is not None and self.state.capacity <= 0) or sized == 0:
            return False
        if self.state.capacity is not None:
            self.state.capacity -= 1
        if sized is not None:
            self.state.size_capacity[size] = sized - 1
        return True

    def _sku_allowed(self, size: str, zones: list[str], spot: bool) -> None:
        """SkuNotAvailable (409) for a size restricted here, in a zone asked for, or as
        spot without LowPriorityCapable (the restrictions the SKU listing shows)."""
        sku = next(s for s in self.skus if s["name"] == size)
        refused = False
        for rule in sku.get("restrictions", []):
            if rule["type"] == "Location":
                refused = True
            elif rule["type"] == "Zone":
                refused = refused or bool(set(zones) & set(rule["restrictionInfo"]["zones"]))
        caps = {c["name"]: c["value"] for c in sku.get("capabilities", [])}
        if refused or (spot and caps.get("LowPriorityCapable") != "True"):
            raise ArmError(409, "SkuNotAvailable", SHAPES["SkuNotAvailable"].message)

    def _nic_reserved(self, nic_name: str, vm_name: str) -> None:
        """400 NicReservedForAnotherVm while the NIC is reserved for another VM (deleting it
        counts as another). Body as quoted from real answers in a terraform destroy log (a
        NIC DELETE, status 400) and in DataBiosphere/terra-workspace-manager's Azure VM
        step (a VM PUT): the reservation lasts 180 s and only the message says so."""
        held = self.state.reserved_nics.get(nic_name.lower())
        if held is None or held[1] <= time.monotonic() or (vm_name and held[0] == vm_name.lower()):
            self.state.reserved_nics.pop(nic_name.lower(), None)
            return
        raise ArmError(
            400,
            "NicReservedForAnotherVm",
            "Nic(s) in request is reserved for another Virtual Machine for 180 seconds. "
            "Please provide another nic(s) or retry after 180 seconds. Reserved VM: "
            + self._rid("Microsoft.Compute/virtualMachines", held[0]),
            extra={"details": []},
        )

    def _validate_vm(self, name: str, body: JSON) -> None:
        vm_name, props = name, body.get("properties", {})
        size = props.get("hardwareProfile", {}).get("vmSize", "")
        if size not in {s["name"] for s in self.skus if s["resourceType"] == "virtualMachines"}:
            raise ArmError(400, "InvalidParameter", f"The value {size} of vmSize is invalid.")
        self._sku_allowed(size, body.get("zones") or [], props.get("priority") == "Spot")
        for ref in props.get("networkProfile", {}).get("networkInterfaces", []):
            nic_name = ref.get("id", "").rsplit("/", 1)[-1]
            if nic_name.lower() not in self.state.nics:
                raise ArmError(400, "InvalidResourceReference", f"{ref.get('id')} not found.")
            self._nic_reserved(nic_name, vm_name)
        image = props.get("storageProfile", {}).get("imageReference", {})
        if not self._image_exists(image):
            raise ArmError(404, "ImageNotFound", f"image {image} not found.")
        key = _gallery_key([s.lower() for s in image.get("id", "").split("/") if s])
        if key is not None and not self.galleries.replicated(key, self.location):
            raise ArmError(
                404,
                "GalleryImageNotFound",
                f"The gallery image {image['id']} is not available in {self.location} region. "
                "Please contact image owner to replicate to this region, or change your "
                "requested region.",
            )
        if props.get("priority") == "Spot" and props.get("evictionPolicy") not in (
            "Delete",
            "Deallocate",
        ):
            raise ArmError(400, "InvalidParameter", "Spot VMs need an evictionPolicy.")
        size = props.get("storageProfile", {}).get("osDisk", {}).get("diskSizeGB")
        if size is not None and (not isinstance(size, int) or not 1 <= size <= 4095):
            raise ArmError(400, "InvalidParameter", f"The value {size} of diskSizeGB is invalid.")
        data = props.get("osProfile", {}).get("customData")
        if data is not None:
            base64.b64decode(data, validate=True)

    def _new_vm(self, name: str, body: JSON) -> JSON:
        props = copy.deepcopy(body.get("properties", {}))
        props["provisioningState"] = "Creating"
        props["vmId"] = str(uuid.uuid4())
        props["timeCreated"] = datetime.now(UTC).isoformat()
        os_disk = props.setdefault("storageProfile", {}).setdefault("osDisk", {})
        disk_name = os_disk.get("name") or f"{name}_OsDisk_1_{uuid.uuid4().hex}"
        os_disk["name"] = disk_name
        os_disk["managedDisk"] = {"id": self._rid("Microsoft.Compute/disks", disk_name)}
        return {
            "id": self._rid("Microsoft.Compute/virtualMachines", name),
            "name": name,
            "type": "Microsoft.Compute/virtualMachines",
            "location": body.get("location", self.location),
            "tags": body.get("tags", {}),
            **({"zones": body["zones"]} if body.get("zones") else {}),
            "properties": props,
            "_power": "starting",
        }

    def _attach_nics(self, vm: JSON) -> None:
        for ref in vm["properties"].get("networkProfile", {}).get("networkInterfaces", []):
            nic = self.state.nics.get(ref["id"].rsplit("/", 1)[-1].lower())
            if nic is not None:
                nic["properties"]["virtualMachine"] = {"id": vm["id"]}

    def _finish_create(self, vm: JSON, error: JSON | None) -> Any:
        def finish() -> None:
            if error is not None:
                vm["properties"]["provisioningState"] = "Failed"
                vm["_power"] = "deallocated"
                return
            vm["properties"]["provisioningState"] = "Succeeded"
            vm["_power"] = "running"
            disk_name = vm["properties"]["storageProfile"]["osDisk"]["name"]
            self.state.disks[disk_name.lower()] = {
                "id": self._rid("Microsoft.Compute/disks", disk_name),
                "name": disk_name,
                "location": self.location,
                "properties": {
                    "provisioningState": "Succeeded",
                    "diskState": "Attached",
                    "diskSizeGB": vm["properties"]["storageProfile"]["osDisk"].get(
                        "diskSizeGB", 30
                    ),
                },
            }

        return finish

    def _delete_vm(self, name: str, vm: JSON | None) -> Reply:
        if vm is None:
            return Reply(204, None)
        vm["_failed"] = vm["properties"]["provisioningState"] == "Failed"
        vm["properties"]["provisioningState"] = "Deleting"
        vm["_power"] = "deallocating"

        def finish() -> None:
            gone = self.state.vms.pop(name.lower(), None)
            if gone is not None:
                self._delete_attached(gone)
                self._release(gone["id"])

        op_url = self._operation(None, finish)
        return Reply(202, None, {"Azure-AsyncOperation": op_url, "Location": op_url})

    def _delete_attached(self, vm: JSON) -> None:
        """A deleted VM's deletables go with it (delete option Delete); the NIC of a VM
        whose creation failed, or one kept, stays reserved for that VM for 180 s
        (NicReservedForAnotherVm, see _nic_reserved)."""
        props = vm["properties"]
        until = time.monotonic() + self.nic_reservation_s
        for ref in props.get("networkProfile", {}).get("networkInterfaces", []):
            nic = self.state.nics.get(ref["id"].rsplit("/", 1)[-1].lower())
            if nic is None:
                continue
            nic["properties"].pop("virtualMachine", None)
            goes = ref.get("properties", {}).get("deleteOption") == "Delete"
            if self.honor_delete_options and goes and not vm.get("_failed"):
                self.state.nics.pop(nic["name"].lower(), None)
            else:
                self.state.reserved_nics[nic["name"].lower()] = (vm["name"].lower(), until)
        os_disk = props.get("storageProfile", {}).get("osDisk", {})
        if self.honor_delete_options and os_disk.get("deleteOption") == "Delete":
            self.state.disks.pop(os_disk.get("name", "").lower(), None)

    # network interfaces / disks ------------------------------------------------------

    def _nics(self, req: Req) -> Reply:
        if not req.segs:
            return self._page(req.path, req.query, list(self.state.nics.values()))
        name, method = req.segs[0], req.method
        nic = self.state.nics.get(name.lower())
        if method == "GET":
            if nic is None:
                raise ArmError(404, "NotFound", _not_found("networkInterfaces", name))
            return Reply(200, nic)
        if method == "DELETE":
            if nic is None:
                return Reply(204, None)
            if nic["properties"].get("virtualMachine"):
                raise ArmError(400, "NicInUse", f"Network interface {name} is used by a VM.")
            self._nic_reserved(name, "")
            del self.state.nics[name.lower()]
            return Reply(200, None)
        if method == "PUT":
            return self._put_nic(name, nic, json.loads(req.body))
        raise ArmError(405, "MethodNotAllowed", method)

    def _put_nic(self, name: str, nic: JSON | None, body: JSON) -> Reply:
        configs = body.get("properties", {}).get("ipConfigurations", [])
        subnet = (configs[0].get("properties", {}).get("subnet", {}) if configs else {}).get("id")
        if not subnet or subnet.lower() != self.vnet_subnet.lower():
            raise ArmError(400, "InvalidResourceReference", f"Subnet {subnet} not found.")
        if nic is not None:
            nic["tags"] = body.get("tags", nic.get("tags", {}))
            return Reply(200, nic)
        address = f"10.0.{self.state.next_ip // 250}.{self.state.next_ip % 250 + 4}"
        self.state.next_ip += 1
        nic_id = self._rid("Microsoft.Network/networkInterfaces", name)
        nic = {
            "id": nic_id,
            "name": name,
            "location": body.get("location", self.location),
            "tags": body.get("tags", {}),
            "properties": {
                "provisioningState": "Succeeded",
                "ipConfigurations": [
                    {
                        "id": f"{nic_id}/ipConfigurations/{configs[0].get('name', 'ipconfig1')}",
                        "name": configs[0].get("name", "ipconfig1"),
                        "properties": {
                            "privateIPAddress": address,
                            "privateIPAllocationMethod": "Dynamic",
                            "subnet": {"id": subnet},
                            "primary": True,
                        },
                    }
                ],
            },
        }
        # NetworkInterfacePropertiesFormat.enableAcceleratedNetworking (Network Interfaces -
        # Create Or Update, REST reference): kept as sent, as ARM answers it back
        if "enableAcceleratedNetworking" in body.get("properties", {}):
            accelerated = bool(body["properties"]["enableAcceleratedNetworking"])
            nic["properties"]["enableAcceleratedNetworking"] = accelerated
        self.state.nics[name.lower()] = nic
        return Reply(201, nic)

    def _disks(self, req: Req) -> Reply:
        key = req.segs[0].lower() if req.segs else ""
        disk = self.state.disks.get(key)
        if req.method == "DELETE" and key:
            self.state.disks.pop(key, None)
            return Reply(200 if disk else 204, None)
        if req.method == "GET" and disk is not None:
            return Reply(200, disk)
        raise ArmError(404, "ResourceNotFound", _not_found("disks", "/".join(req.segs)))

    # images ----------------------------------------------------------------------

    def _images(self, req: Req) -> Reply:
        if req.method == "GET" and req.segs and req.segs[0] in self.managed_images:
            return Reply(200, {"id": req.path, "name": req.segs[0], "location": self.location})
        raise ArmError(404, "ResourceNotFound", _not_found("images", "/".join(req.segs)))

    def _vnets(self, req: Req) -> Reply:
        if req.method == "GET" and req.path.lower() == self.vnet_subnet.lower():
            props = {"addressPrefix": "10.0.0.0/16", "provisioningState": "Succeeded"}
            return Reply(200, {"id": self.vnet_subnet, "name": req.segs[-1], "properties": props})
        raise ArmError(404, "NotFound", _not_found("virtualNetworks", "/".join(req.segs)))

    def _ssh_keys(self, req: Req) -> Reply:
        key = self.ssh_keys.get(req.segs[0].lower()) if req.segs else None
        if req.method == "GET" and key is not None:
            body = {"id": req.path, "name": req.segs[0], "location": self.location}
            return Reply(200, {**body, "properties": {"publicKey": key}})
        raise ArmError(404, "ResourceNotFound", _not_found("sshPublicKeys", "/".join(req.segs)))

    def _galleries(self, req: Req) -> Reply:
        with self.lock:
            found = self.galleries.route(req)
        if found is not None:
            return found
        raise ArmError(404, "ResourceNotFound", _not_found("galleries", "/".join(req.segs)))

    def _marketplace(self, segs: list[str]) -> Reply:
        low = [s.lower() for s in segs]
        # .../publishers/P/artifacttypes/vmimage/offers/O/skus/S/versions[/V]
        at = low.index("publishers")
        publisher, offer, sku = low[at + 1], low[at + 5], low[at + 7]
        versions = self.marketplace.get((publisher, offer, sku))
        if versions is None:
            raise ArmError(404, "PlatformImageNotFound", "Platform image not found.")
        if len(low) == at + 9:  # the versions list: a bare JSON array
            return Reply(200, [{"name": v, "location": self.location} for v in versions])
        if low[at + 9] not in versions:
            raise ArmError(404, "PlatformImageNotFound", "Platform image version not found.")
        return Reply(200, {"name": low[at + 9], "location": self.location, "properties": {}})

    def _image_exists(self, ref: JSON) -> bool:
        if ref.get("id"):
            segs = [s.lower() for s in ref["id"].split("/") if s]
            key = _gallery_key(segs)
            if key is not None:
                return self.galleries.exists(key)
            return segs[-1] in self.managed_images
        key3 = (ref.get("publisher", "").lower(), ref.get("offer", "").lower())
        versions = self.marketplace.get((*key3, ref.get("sku", "").lower()))
        return versions is not None and ref.get("version") in (*versions, "latest")


def _gallery_key(segs: list[str]) -> tuple[str, str, str] | None:
    """(gallery, image, version) of a lower-cased gallery image version id's segments."""
    if "galleries" not in segs:
        return None
    at = segs.index("galleries")
    return (segs[at + 1], segs[at + 3], segs[at + 5]) if len(segs) > at + 5 else None


def _not_found(kind: str, name: str) -> str:
    return f"The Resource 'Microsoft.Compute/{kind}/{name}' under resource group was not found."


def _aad_error(status: int, error: str, code: int, text: str) -> Reply:
    return Reply(
        status,
        {
            "error": error,
            "error_description": f"AADSTS{code}: {text}",
            "error_codes": [code],
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ"),
            "trace_id": str(uuid.uuid4()),
            "correlation_id": str(uuid.uuid4()),
        },
    )


def _sku_in(sku: JSON, query: dict[str, str]) -> bool:
    wanted = re.search(r"location eq '([^']+)'", query.get("$filter", ""))
    return wanted is None or wanted.group(1).lower() in [x.lower() for x in sku["locations"]]


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[FakeAzure]:
    with http_fake.running(FakeAzure, **kwargs) as fake:
        yield fake


def main() -> None:
    """Serve until SIGTERM/SIGINT; print the connection details as one JSON line first."""
    http_fake.serve_until_signalled(FakeAzure())


if __name__ == "__main__":
    main()

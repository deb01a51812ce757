"""moto's EC2/STS server on 127.0.0.1 behind a WSGI middleware that adds what moto lacks.

moto (5.x, server mode) answers the real boto3 client, but it is not idempotent per
`ClientToken`, never fills CreateFleet `Errors` and has no capacity, quota, throttling or
credential failures. The middleware in front of it:

- replays the first successful CreateFleet / RunInstances answer for a `ClientToken`
  (IdempotentParameterMismatch when the same token comes with other parameters);
- fails the next N launch calls (or any action) with an EC2 error code and HTTP status;
- limits capacity, in all or per instance type: only N more instances start; a CreateFleet
  asking for more is cut down and answers the instances that did start plus an `Errors`
  entry (InsufficientInstanceCapacity), one whose MinTargetCapacity cannot be met starts
  none (API reference, OnDemandOptionsRequest: "If this minimum capacity isn't reached, no
  instances are launched"), a RunInstances starts as many as it can up to MaxCount, none
  below MinCount (moto itself would start MinCount, and ignores MinTargetCapacity);
  per-type capacity is exact for a fleet whose overrides name one type (the all-or-nothing
  fleets), and is taken in override order otherwise;
- delays answers (`slow`), holds one request before or after acting on it until released
  (`hold_next`, tests/fakes/gate.py), rejects an access key id (EC2 AuthFailure 401, STS
  InvalidClientTokenId 403), can answer CreateFleet with InvalidAction (`no_fleet_api`), and
  can fill a short fleet's `Errors` with another code (`fleet_errors_with`).

Control it from the test process through the thread-safe methods, or from another process
by POSTing JSON to `/_fake/<method>` (see CONTROL_METHODS). `POST /moto-api/reset` resets
moto and the middleware. `python -m tests.fakes.aws_fake` serves until SIGTERM and prints
its connection details as one JSON line (give the daemon AWS_ENDPOINT_URL=url).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import signal
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode
from xml.sax.saxutils import escape

from moto.ec2.models.core import TaggedEC2Resource
from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from tests.fakes.aws_placement import PlacementGroups
from tests.fakes.aws_reservations import (
    FULL_CODE,
    FakeReservation,
    Target,
    describe_xml,
    full_error_xml,
    target_of,
)
from tests.fakes.gate import Gate, Gates

REGION = "us-east-1"
LAUNCH_ACTIONS = frozenset({"CreateFleet", "RunInstances"})
PLACEMENT_ACTIONS = frozenset(
    {"CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup"}
)
CONTROL_METHODS = (
    "fail_next",
    "fail_next_launches",
    "limit_capacity",
    "slow",
    "reject_access_key",
    "no_fleet_api",
    "no_capacity_for",
    "fleet_errors_with",
    "clear_faults",
)
# How EC2 signals each fault (HTTP status real EC2 uses; botocore retries 5xx and throttles).
DEFAULT_STATUS = {
    "InsufficientInstanceCapacity": 500,
    "InsufficientCapacity": 500,
    "RequestLimitExceeded": 503,
    "InternalError": 500,
    "ServiceUnavailable": 503,
    "AuthFailure": 401,
    "UnauthorizedOperation": 403,
}
# What a CreateFleet `Errors` item says when the fleet fell short (fleet_errors_with changes it)
FLEET_CODE = "InsufficientInstanceCapacity"
FLEET_MESSAGE = (
    "We currently do not have sufficient capacity in the Availability Zone you requested."
)
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/[^/]+/[^/]+/([^/]+)/")
_OVERRIDE = re.compile(r"LaunchTemplateConfigs\.\d+\.Overrides\.\d+\.")
EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"

StartResponse = Callable[..., Any]
Environ = dict[str, Any]


@dataclass
class Fault:
    code: str
    status: int
    remaining: int
    actions: frozenset[str] | None  # None: every action
    message: str


@dataclass
class Slowness:
    seconds: float
    remaining: int | None
    actions: frozenset[str] | None


@dataclass
class Answer:
    status: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class Request:
    """One AWS query-protocol request as the middleware sees it."""

    service: str
    access_key: str
    action: str
    params: list[tuple[str, str]]

    def get(self, name: str, default: str = "") -> str:
        return next((v for k, v in self.params if k == name), default)


@dataclass
class MiddlewareState:
    faults: list[Fault] = field(default_factory=list)
    slowness: list[Slowness] = field(default_factory=list)
    capacity: int | None = None
    type_capacity: dict[str, int] = field(default_factory=dict)  # per instance type
    no_capacity_types: set[str] = field(default_factory=set)
    rejected_keys: set[str] = field(default_factory=set)
    fleet_api: bool = True
    tokens: dict[tuple[str, str], tuple[str, Answer]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    reservations: dict[str, FakeReservation] = field(default_factory=dict)
    fleet_error: tuple[str, str] = (FLEET_CODE, FLEET_MESSAGE)  # code, message of Errors items


class FaultMiddleware:
    """The WSGI app in front of moto's."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self.app = app
        self.region = REGION
        self.lock = threading.RLock()
        self.state = MiddlewareState()
        self.gates = Gates()
        self.placement = PlacementGroups()  # tests/fakes/aws_placement.py
        self._token_locks: dict[tuple[str, str], threading.Lock] = {}

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        body = _read_body(environ)
        if path.startswith("/_fake/"):
            return self._control(path.removeprefix("/_fake/"), body, start_response)
        if path == "/moto-api/reset":
            self.reset_state()
        req = _parse(environ, body)
        answer = self._answer(req, environ, body) if req else self._forward(environ, body)
        length = ("Content-Length", str(len(answer.body)))
        start_response(answer.status, [*answer.headers, length])
        return [answer.body]

    # ------------------------------------------------------------------ control

    def reset_state(self) -> None:
        with self.lock:
            self.state = MiddlewareState()
            self._token_locks.clear()
        self.placement.reset()

    def _control(self, name: str, body: bytes, start_response: StartResponse) -> list[bytes]:
        if name not in CONTROL_METHODS:
            start_response("404 Not Found", [("Content-Type", "application/json")])
            return [json.dumps({"error": f"no control method {name}"}).encode()]
        getattr(self, name)(**(json.loads(body) if body else {}))
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"ok": true}']

    def fail_next(
        self,
        code: str,
        attempts: int = 1,
        actions: Iterable[str] | None = None,
        status: int | None = None,
        message: str = "",
    ) -> None:
        fault = Fault(
            code,
            status or DEFAULT_STATUS.get(code, 400),
            attempts,
            frozenset(actions) if actions is not None else None,
            message or f"injected {code}",
        )
        with self.lock:
            self.state.faults.append(fault)

    def fail_next_launches(self, code: str, attempts: int = 1, status: int | None = None) -> None:
        self.fail_next(code, attempts, LAUNCH_ACTIONS, status)

    def limit_capacity(self, instances: int | None, instance_type: str | None = None) -> None:
        with self.lock:
            if instance_type is None:
                self.state.capacity = instances
            elif instances is None:
                self.state.type_capacity.pop(instance_type, None)
            else:
                self.state.type_capacity[instance_type] = instances

    def slow(
        self, seconds: float, attempts: int | None = None, actions: Iterable[str] | None = None
    ) -> None:
        chosen = frozenset(actions) if actions is not None else None
        with self.lock:
            self.state.slowness.append(Slowness(seconds, attempts, chosen))

    def reject_access_key(self, access_key_id: str) -> None:
        with self.lock:
            self.state.rejected_keys.add(access_key_id)

    def no_fleet_api(self, disabled: bool = True) -> None:
        with self.lock:
            self.state.fleet_api = not disabled

    def fleet_errors_with(self, code: str, message: str) -> None:
        """CreateFleet `Errors` items (a fleet short of capacity, or of every type) carry this
        code and message instead of InsufficientInstanceCapacity: EC2 puts any launch error
        of an `instant` fleet there (VcpuLimitExceeded, InsufficientFreeAddressesInSubnet,
        ...) and answers 200."""
        with self.lock:
            self.state.fleet_error = (code, message)

    def clear_faults(self) -> None:
        with self.lock:
            self.state.fleet_error = (FLEET_CODE, FLEET_MESSAGE)
            self.state.faults.clear()
            self.state.slowness.clear()
            self.state.capacity = None
            self.state.type_capacity.clear()
            self.state.no_capacity_types.clear()
            self.state.rejected_keys.clear()
            self.state.fleet_api = True

    def calls(self) -> dict[str, int]:
        with self.lock:
            return dict(self.state.calls)

    def add_capacity_reservation(self, reservation: FakeReservation) -> None:
        with self.lock:
            self.state.reservations[reservation.reservation_id] = reservation

    # ------------------------------------------------------------------ reservations

    def _backend(self) -> Any:
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        return ec2_backends[DEFAULT_ACCOUNT_ID][self.region]

    def _used(self) -> dict[str, int]:
        """Live instances per reservation (a terminated one gives its slot back)."""
        backend = self._backend()
        used: dict[str, int] = {}
        with self.lock:
            for res in self.state.reservations.values():
                alive = 0
                for iid in res.instances:
                    try:
                        alive += backend.get_instance(iid).state != "terminated"
                    except Exception:  # noqa: S112 (forgotten by forget_terminated)
                        continue
                used[res.reservation_id] = alive
        return used

    def _describe_reservations(self, req: Request) -> Answer:
        wanted = [v for k, v in req.params if k.startswith("CapacityReservationId.")]
        with self.lock:
            known = dict(self.state.reservations)
        for rid in wanted:
            if rid not in known:
                message = f"The capacity reservation ID '{rid}' does not exist"
                return _ec2_error(400, "InvalidCapacityReservationId.NotFound", message)
        items = [known[r] for r in wanted] if wanted else list(known.values())
        return _xml_answer(describe_xml(items, self._used(), _now(), EC2_NS))

    def _pool(self, target: Target, itype: str) -> list[tuple[FakeReservation, int]]:
        """The reservations a launch may use, each with its free slots."""
        used, now = self._used(), _now()
        with self.lock:
            candidates = [
                res
                for res in self.state.reservations.values()
                if res.instance_type == itype
                and res.state(now) == "active"
                and (
                    (target.open and res.match == "open")
                    or res.reservation_id == target.reservation_id
                    or (target.group is not None and target.group in res.groups)
                )
            ]
        return [(res, res.total - used.get(res.reservation_id, 0)) for res in candidates]

    def _reserved_launch(self, req: Request, environ: Environ) -> Answer | None:
        """A launch whose launch template targets reserved capacity (None: it does not)."""
        fleet = req.action == "CreateFleet"
        head = (
            "LaunchTemplateConfigs.1.LaunchTemplateSpecification." if fleet else "LaunchTemplate."
        )
        try:
            template = self._backend().get_launch_template_by_name(
                req.get(head + "LaunchTemplateName")
            )
            data = template.get_version(req.get(head + "Version")).data
        except Exception:  # moto answers a missing template itself
            return None
        target = target_of(data)
        if target is None:
            return None
        itype = req.get(
            "LaunchTemplateConfigs.1.Overrides.1.InstanceType" if fleet else "InstanceType"
        )
        count_key = "TargetCapacitySpecification.TotalTargetCapacity" if fleet else "MaxCount"
        wanted = int(req.get(count_key, "1") or 1)
        # all or none below it: MinTargetCapacity (OnDemandOptionsRequest), MinCount
        minimum = int(
            req.get("OnDemandOptions.MinTargetCapacity" if fleet else "MinCount", "1") or 1
        )
        pool = self._pool(target, itype)
        room = sum(max(0, free) for _, free in pool)
        granted = wanted if target.open else min(wanted, room)
        if granted == 0 or granted < minimum:
            if fleet:
                return _xml_answer(_empty_fleet_xml(full_error_xml(target, itype)))
            message = f"Insufficient capacity in the targeted Capacity Reservation for {itype}."
            return _ec2_error(400, FULL_CODE, message)
        params = _replace(req.params, count_key, granted)
        if fleet:  # moto knows no capacity-block capacity type
            params = [
                (k, "on-demand" if k.endswith("DefaultTargetCapacityType") else v)
                for k, v in params
            ]
        else:
            params = _replace(params, "MinCount", granted)
        answer = self._forward(environ, _encode(params))
        if not answer.status.startswith("200"):
            return answer
        self._seat(answer.body, pool)
        if fleet and granted < wanted:
            answer.body = answer.body.replace(
                b"</CreateFleetResponse>",
                full_error_xml(target, itype).encode() + b"</CreateFleetResponse>",
            )
        return answer

    def _seat(self, body: bytes, pool: list[tuple[FakeReservation, int]]) -> None:
        """Put the new instances into the pool's free slots, in order; the rest run
        outside (an 'open' launch's overflow, as plain on-demand)."""
        backend = self._backend()
        free = [(res, n) for res, n in pool if n > 0]
        ids = list(dict.fromkeys(m.decode() for m in re.findall(rb"i-[0-9a-f]{17}", body)))
        with self.lock:
            for iid in ids:
                if not free:
                    return
                res, room = free[0]
                res.instances.add(iid)
                backend.get_instance(iid).capacity_reservation_id = res.reservation_id
                free = [(res, room - 1), *free[1:]] if room > 1 else free[1:]

    # ------------------------------------------------------------------ requests

    def _answer(self, req: Request, environ: Environ, body: bytes) -> Answer:
        with self.lock:
            self.state.calls[req.action] += 1
        gate = self.gates.arrive(req.action)
        if gate is not None and not gate.after:
            gate.hold()
            return _ec2_error(503, "ServiceUnavailable", "held by a test, never carried out")
        if req.action == "DescribeCapacityReservations":
            answer = self._describe_reservations(req)
        elif req.action in PLACEMENT_ACTIONS:
            answer = self._placement_groups(req)
        else:
            answer = self._carry_out(req, environ, body)
        if gate is not None:
            gate.hold()
        return answer

    def _carry_out(self, req: Request, environ: Environ, body: bytes) -> Answer:
        self._delay(req.action)
        with self.lock:
            rejected = req.access_key in self.state.rejected_keys
        if rejected:
            return _auth_failure(req.service)
        token = req.get("ClientToken")
        if req.action in LAUNCH_ACTIONS and token:
            with self._token_lock((req.action, token)):
                return self._idempotent(req, (req.action, token), environ, body)
        return self._launch_or_forward(req, environ, body)

    def _idempotent(
        self, req: Request, key: tuple[str, str], environ: Environ, body: bytes
    ) -> Answer:
        digest = _digest(req)
        with self.lock:
            seen = self.state.tokens.get(key)
        if seen is not None:
            if seen[0] != digest:
                return _ec2_error(400, "IdempotentParameterMismatch", "token reused")
            return seen[1]
        answer = self._launch_or_forward(req, environ, body)
        if answer.status.startswith("200"):
            with self.lock:
                self.state.tokens[key] = (digest, answer)
        return answer

    def _placement_groups(self, req: Request) -> Answer:
        """Create, describe, delete (tests/fakes/aws_placement.py)."""
        if req.action == "DescribePlacementGroups":
            inner = self.placement.describe(req.params)
            status, code = 200, ""
        elif req.action == "CreatePlacementGroup":
            status, code, inner = self.placement.create(req.params)
        else:
            status, code, inner = self.placement.delete(req.get("GroupName"), self._live)
        if status != 200:
            return _ec2_error(status, code, inner)
        tag = f"{req.action}Response"
        xml = f'<{tag} xmlns="{EC2_NS}"><requestId>{uuid.uuid4()}</requestId>{inner}</{tag}>'
        return _xml_answer(xml)

    def _live(self, instance_id: str) -> bool:
        try:
            return bool(self._backend().get_instance(instance_id).state != "terminated")
        except Exception:  # moto forgot it (forget_terminated): gone
            return False

    def _launch_or_forward(self, req: Request, environ: Environ, body: bytes) -> Answer:
        fault = self._take_fault(req.action)
        if fault is not None:
            return _ec2_error(fault.status, fault.code, fault.message)
        params, group = self.placement.take(req.params)
        if group is None:
            return self._launch(req, environ, body)
        if not self.placement.known(group):
            return _ec2_error(
                400, "InvalidPlacementGroup.Unknown", f"The placement group '{group}' is unknown."
            )
        answer = self._launch(
            Request(req.service, req.access_key, req.action, params), environ, body
        )
        if answer.status.startswith("200"):
            self.placement.seat(group, answer.body)
        return answer

    def _launch(self, req: Request, environ: Environ, body: bytes) -> Answer:
        if req.action == "CreateFleet":
            with self.lock:
                fleet_api = self.state.fleet_api
            if not fleet_api:
                return _ec2_error(400, "InvalidAction", "The action CreateFleet is not valid")
            return self._create_fleet(req, environ)
        if req.action == "RunInstances":
            return self._run_instances(req, environ)
        return self._forward(environ, body)

    def _take_fault(self, action: str) -> Fault | None:
        with self.lock:
            for fault in self.state.faults:
                if fault.remaining > 0 and (fault.actions is None or action in fault.actions):
                    fault.remaining -= 1
                    return fault
        return None

    def _delay(self, action: str) -> None:
        seconds = 0.0
        with self.lock:
            for slow in self.state.slowness:
                if slow.actions is not None and action not in slow.actions:
                    continue
                if slow.remaining is None or slow.remaining > 0:
                    seconds = max(seconds, slow.seconds)
                    if slow.remaining is not None:
                        slow.remaining -= 1
        if seconds:
            time.sleep(seconds)

    def _grant(self, wanted: int, types: list[str]) -> Counter[str]:
        """How many of `wanted` instances may start now, per type in `types`' order (the
        total under "", reserved until given back)."""
        with self.lock:
            granted: Counter[str] = Counter()
            left = (
                wanted if self.state.capacity is None else max(0, min(wanted, self.state.capacity))
            )
            for itype in types or [""]:
                room = self.state.type_capacity.get(itype, left)
                take = max(0, min(left, room))
                granted[itype] += take
                left -= take
                if itype in self.state.type_capacity:
                    self.state.type_capacity[itype] -= take
            total = sum(granted.values())
            if self.state.capacity is not None:
                self.state.capacity -= total
            granted[""] = total
            return granted

    def _give_back(self, granted: Counter[str]) -> None:
        with self.lock:
            if self.state.capacity is not None:
                self.state.capacity += granted[""]
            for itype, count in granted.items():
                if itype in self.state.type_capacity:
                    self.state.type_capacity[itype] += count

    def no_capacity_for(self, instance_types: Iterable[str]) -> None:
        with self.lock:
            self.state.no_capacity_types = set(instance_types)

    def _without_exhausted_types(self, req: Request) -> Request | None:
        """Drop fleet overrides of types with no capacity (None: nothing left to launch)."""
        with self.lock:
            blocked = set(self.state.no_capacity_types)
        if not blocked:
            return req
        kept: dict[str, list[tuple[str, str]]] = {}
        others: list[tuple[str, str]] = []
        for key, value in req.params:
            found = _OVERRIDE.match(key)
            if found:
                kept.setdefault(key.rsplit(".", 1)[0], []).append((key, value))
            else:
                others.append((key, value))
        allowed = [
            items
            for prefix, items in sorted(kept.items())
            if dict(items).get(f"{prefix}.InstanceType") not in blocked
        ]
        if not allowed:
            return None
        renumbered = []
        for index, items in enumerate(allowed, 1):
            for key, value in items:
                head, _, name = key.rpartition(".")
                config = head.split(".Overrides.")[0]
                renumbered.append((f"{config}.Overrides.{index}.{name}", value))
        return Request(req.service, req.access_key, req.action, others + renumbered)

    def _create_fleet(self, req: Request, environ: Environ) -> Answer:
        reserved = self._reserved_launch(req, environ)
        if reserved is not None:
            return reserved
        narrowed = self._without_exhausted_types(req)
        if narrowed is None:
            return _xml_answer(_empty_fleet_xml(_fleet_errors(req, self._fleet_error())))
        req = narrowed
        wanted = int(req.get("TargetCapacitySpecification.TotalTargetCapacity", "0") or 0)
        minimum = max(
            int(req.get(f"{options}.MinTargetCapacity", "0") or 0)
            for options in ("OnDemandOptions", "SpotOptions")
        )
        types = list(
            dict.fromkeys(
                v for k, v in req.params if _OVERRIDE.match(k) and k.endswith(".InstanceType")
            )
        )
        grants = self._grant(wanted, types)
        granted = grants[""]
        if granted == wanted:
            return self._forward(environ, _encode(req.params))
        errors = _fleet_errors(req, self._fleet_error())
        if granted < max(minimum, 1):
            self._give_back(grants)
            return _xml_answer(_empty_fleet_xml(errors))
        params = _replace(req.params, "TargetCapacitySpecification.TotalTargetCapacity", granted)
        answer = self._forward(environ, _encode(params))
        if answer.status.startswith("200"):
            answer.body = answer.body.replace(
                b"</CreateFleetResponse>", errors.encode() + b"</CreateFleetResponse>"
            )
        return answer

    def _fleet_error(self) -> tuple[str, str]:
        with self.lock:
            return self.state.fleet_error

    def _run_instances(self, req: Request, environ: Environ) -> Answer:
        reserved = self._reserved_launch(req, environ)
        if reserved is not None:
            return reserved
        maximum = int(req.get("MaxCount", "1") or 1)
        minimum = int(req.get("MinCount", "1") or 1)
        grants = self._grant(maximum, [req.get("InstanceType")] if req.get("InstanceType") else [])
        granted = grants[""]
        if granted < minimum:
            self._give_back(grants)
            message = "We currently do not have sufficient capacity in the zone you requested."
            return _ec2_error(500, "InsufficientInstanceCapacity", message)
        # EC2 starts as many as it can up to MaxCount; moto starts MinCount: ask for `granted`
        params = _replace(_replace(req.params, "MaxCount", granted), "MinCount", granted)
        return self._forward(environ, _encode(params))

    def _forward(self, environ: Environ, body: bytes) -> Answer:
        environ = dict(environ)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        captured: dict[str, Any] = {}

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            captured["status"], captured["headers"] = status, headers

        chunks = self.app(environ, start)
        try:
            data = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        return Answer(captured["status"], headers, data)

    def _token_lock(self, key: tuple[str, str]) -> threading.Lock:
        with self.lock:
            return self._token_locks.setdefault(key, threading.Lock())


# ---------------------------------------------------------------------- wire helpers


def _now() -> datetime:
    return datetime.now(UTC)


def _read_body(environ: Environ) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body: bytes = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _parse(environ: Environ, body: bytes) -> Request | None:
    """Only signed query-protocol requests (EC2, STS) are looked at; the rest pass through."""
    found = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if found is None or environ.get("REQUEST_METHOD") != "POST":
        return None
    params = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    action = next((v for k, v in params if k == "Action"), "")
    if not action:
        return None
    return Request(found.group(2), found.group(1), action, params)


def _encode(params: list[tuple[str, str]]) -> bytes:
    return urlencode(params).encode()


def _replace(params: list[tuple[str, str]], name: str, value: int) -> list[tuple[str, str]]:
    return [(k, str(value) if k == name else v) for k, v in params]


def _digest(req: Request) -> str:
    relevant = sorted((k, v) for k, v in req.params if k != "ClientToken")
    return hashlib.sha256(json.dumps(relevant).encode()).hexdigest()


def _xml_answer(xml: str, status: str = "200 OK") -> Answer:
    return Answer(status, [("Content-Type", "text/xml")], xml.encode())


def _ec2_error(status: int, code: str, message: str) -> Answer:
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code>"
        f"<Message>{escape(message)}</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    )
    return _xml_answer(xml, _status_line(status))


def _auth_failure(service: str) -> Answer:
    if service == "ec2":
        return _ec2_error(401, "AuthFailure", "AWS was not able to validate the credentials.")
    xml = (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error>'
        "<Type>Sender</Type><Code>InvalidClientTokenId</Code>"
        "<Message>The security token included in the request is invalid.</Message>"
        f"</Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
    )
    return _xml_answer(xml, _status_line(403))


def _status_line(status: int) -> str:
    reasons = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 500: "Server Error"}
    return f"{status} {reasons.get(status, 'Service Unavailable')}"


def _fleet_errors(req: Request, error: tuple[str, str]) -> str:
    """An `errorSet` with one item per override in the request, each with `error`."""
    lifecycle = req.get("TargetCapacitySpecification.DefaultTargetCapacityType", "on-demand")
    items: list[str] = []
    prefixes = sorted({k.rsplit(".", 1)[0] for k, _ in req.params if _OVERRIDE.match(k)})
    for prefix in prefixes or ["LaunchTemplateConfigs.1.Overrides.1"]:
        config = prefix.split(".Overrides.")[0]
        overrides = "".join(
            f"<{tag}>{escape(req.get(f'{prefix}.{name}'))}</{tag}>"
            for name, tag in (
                ("InstanceType", "instanceType"),
                ("SubnetId", "subnetId"),
                ("AvailabilityZone", "availabilityZone"),
            )
            if req.get(f"{prefix}.{name}")
        )
        spec = "".join(
            f"<{tag}>{escape(req.get(f'{config}.LaunchTemplateSpecification.{name}'))}</{tag}>"
            for name, tag in (("LaunchTemplateName", "launchTemplateName"), ("Version", "version"))
        )
        items.append(
            "<item><launchTemplateAndOverrides>"
            f"<launchTemplateSpecification>{spec}</launchTemplateSpecification>"
            f"<overrides>{overrides}</overrides></launchTemplateAndOverrides>"
            f"<lifecycle>{escape(lifecycle)}</lifecycle>"
            f"<errorCode>{escape(error[0])}</errorCode>"
            f"<errorMessage>{escape(error[1])}</errorMessage></item>"
        )
    return f"<errorSet>{''.join(items)}</errorSet>"


def _empty_fleet_xml(errors: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateFleetResponse xmlns="{EC2_NS}">'
        f"<requestId>{uuid.uuid4()}</requestId><fleetId>fleet-{uuid.uuid4()}</fleetId>"
        f"{errors}<fleetInstanceSet/></CreateFleetResponse>"
    )


# ---------------------------------------------------------------------- the server


class _QuietHandler(MotoRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return


class _Server(ThreadedMotoServer):
    """ThreadedMotoServer whose WSGI app is moto's behind FaultMiddleware."""

    def __init__(self, middleware_box: list[FaultMiddleware]) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self._box = middleware_box

    def _server_entry(self) -> None:
        app = FaultMiddleware(DomainDispatcherApplication(create_backend_app))
        self._box.append(app)
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=_QuietHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever(poll_interval=0.05)


def _own_tags(resource: TaggedEC2Resource) -> list[dict[str, str]]:
    """moto's TaggedEC2Resource.get_tags, answered from the backend's tag table by the
    resource's id instead of a regex scan of every tag in the region: moto calls it per
    instance per tag filter and again to render each one, so a DescribeInstances over 5,000
    tagged instances scanned some 30,000 tags 15,000 times (bench/bench_burst.py). Same
    entries, same order (the table's, for this id); the API's answers do not change."""
    found: Any = resource  # moto's resources type neither id nor ec2_backend
    if not found.id:
        return []
    kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(found.id), "")
    own = found.ec2_backend.tags.get(found.id, {})
    return [
        {"resource_id": found.id, "key": key, "value": value, "resource_type": kind}
        for key, value in own.items()
    ]


setattr(TaggedEC2Resource, "get_tags", _own_tags)  # noqa: B010 - moto's method replaced


class FakeAws:
    """One moto server with the fault middleware. Methods are safe from any thread."""

    def __init__(self, region: str = REGION) -> None:
        self.region = region
        self._box: list[FaultMiddleware] = []
        self._server: _Server | None = None

    def start(self) -> FakeAws:
        self._server = _Server(self._box)
        self._server.start()
        self.middleware.region = self.region
        self.reset()  # moto's backends are per process: forget what an earlier fake made
        return self

    def stop(self) -> None:
        if self._box:
            self.middleware.gates.release_all()
        if self._server is not None:
            self._server.stop()
            inner = self._server._server
            if inner is not None:
                inner.server_close()
            self._server = None

    def __enter__(self) -> FakeAws:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def middleware(self) -> FaultMiddleware:
        assert self._box, "fake not started"
        return self._box[0]

    @property
    def url(self) -> str:
        assert self._server is not None, "fake not started"
        host, port = self._server.get_host_and_port()
        return f"http://{host}:{port}"

    def info(self) -> dict[str, Any]:
        return {"url": self.url, "region": self.region}

    def reset(self) -> None:
        """Forget every instance, launch template and fault (POST /moto-api/reset)."""
        url = f"{self.url}/moto-api/reset"
        request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 (loopback)
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            answer.read()

    # fault injection, delegated to the middleware (thread-safe there)
    def fail_next(
        self,
        code: str,
        attempts: int = 1,
        actions: Iterable[str] | None = None,
        status: int | None = None,
    ) -> None:
        """Answer the next `attempts` matching calls (all actions when None) with `code`."""
        self.middleware.fail_next(code, attempts, actions, status)

    def fail_next_launches(self, code: str, attempts: int = 1, status: int | None = None) -> None:
        """Fail the next `attempts` CreateFleet/RunInstances calls with `code`."""
        self.middleware.fail_next_launches(code, attempts, status)

    def limit_capacity(self, instances: int | None, instance_type: str | None = None) -> None:
        """Only `instances` more instances (of `instance_type`, when named) can start (None:
        no limit)."""
        self.middleware.limit_capacity(instances, instance_type)

    def slow(
        self, seconds: float, attempts: int | None = None, actions: Iterable[str] | None = None
    ) -> None:
        """Delay the next `attempts` matching answers (all when None) by `seconds`."""
        self.middleware.slow(seconds, attempts, actions)

    def forget_terminated(self) -> int:
        """Drop terminated instances (and their tags) from moto's memory, as EC2 forgets
        them after about an hour: moto finds an instance, and each instance's tags, by
        scanning them all, so a long campaign's thousands of terminated instances would
        slow every call. Returns how many were dropped."""
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.ec2.models import ec2_backends

        backend = ec2_backends[DEFAULT_ACCOUNT_ID][self.region]
        dropped = []
        for reservation_id, reservation in list(backend.reservations.items()):
            alive = [i for i in reservation.instances if i.state != "terminated"]
            dropped += [i.id for i in reservation.instances if i.state == "terminated"]
            if alive:
                reservation.instances = alive
            else:
                del backend.reservations[reservation_id]
        for instance_id in dropped:
            backend.tags.pop(instance_id, None)
        return len(dropped)

    def hold_next(self, action: str, nth: int = 1, after: bool = False) -> Gate:
        """Hold the `nth` next call of `action` (before or after carrying it out) until the
        gate is released (tests/fakes/gate.py)."""
        return self.middleware.gates.add(action, nth, after)

    def no_capacity_for(self, instance_types: Iterable[str]) -> None:
        """CreateFleet finds no capacity for these types (an Errors item each), as EC2
        reports a type that is sold out in every zone; other overrides still launch."""
        self.middleware.no_capacity_for(instance_types)

    def fleet_errors_with(self, code: str, message: str) -> None:
        """A short CreateFleet's `Errors` items carry `code` and `message` (EC2 answers 200
        with the cause of each override's failure there: a quota, a full subnet, ...)."""
        self.middleware.fleet_errors_with(code, message)

    def reject_access_key(self, access_key_id: str) -> None:
        """Every request signed with this access key id fails (EC2 AuthFailure, STS 403)."""
        self.middleware.reject_access_key(access_key_id)

    def no_fleet_api(self, disabled: bool = True) -> None:
        """CreateFleet answers InvalidAction, as an EC2-compatible cloud without fleets."""
        self.middleware.no_fleet_api(disabled)

    def clear_faults(self) -> None:
        self.middleware.clear_faults()

    def add_capacity_reservation(self, reservation: FakeReservation) -> None:
        """An On-Demand Capacity Reservation or Capacity Block (tests/fakes/aws_reservations.py)
        that DescribeCapacityReservations lists and reserved launches draw from."""
        self.middleware.add_capacity_reservation(reservation)

    def calls(self) -> dict[str, int]:
        """Requests seen per action (every attempt, retries included)."""
        return self.middleware.calls()

    def placement_groups(self) -> list[str]:
        """The names of the placement groups that exist (tests/fakes/aws_placement.py)."""
        return self.middleware.placement.names()

    def placement_members(self, name: str) -> set[str]:
        """The instances launched into a placement group (terminated ones included)."""
        return self.middleware.placement.members(name)


@contextlib.contextmanager
def running(region: str = REGION) -> Iterator[FakeAws]:
    fake = FakeAws(region).start()
    try:
        yield fake
    finally:
        fake.stop()


def main() -> None:
    """Serve until SIGTERM/SIGINT; print the connection details as one JSON line first."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with running() as fake:
        print(json.dumps(fake.info()), flush=True)
        stop.wait()


if __name__ == "__main__":
    main()

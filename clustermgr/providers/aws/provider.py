"""AWS provider: EC2 instant fleets from one launch template per clustermgr template.

Only client.py and errors.py import boto3 or botocore. Every instance carries our tags; list
and terminate only ever touch instances tagged with this cluster's name.

Launch: validate the spec (DescribeInstanceTypes, DescribeImages; cached), make sure the
launch template holds the current content (a new version only when it changed), then one
CreateFleet (type instant) per batch of at most `launch_batch_size`, with an override for
every instance type x subnet. The ClientToken comes from the request id and the batch, so a
retried launch gets EC2's answer to the first one instead of a second set of instances.
One DescribeInstances (by our request tag) fills in addresses, then each new instance gets
its node-name tag (one CreateTags per instance; already-named instances are kept as named).

All or nothing (`LaunchSpec.all_or_nothing`, one job's nodes): one CreateFleet per instance
type x subnet in order, each with MinTargetCapacity equal to the count (single type, single
zone), so EC2 starts all of them or none; an answer that still comes back short is
terminated at once (and looked up again) before the next type or subnet is tried.

When the endpoint does not offer CreateFleet (InvalidAction / NotImplemented, as some
EC2-compatible clouds answer; remembered for the provider's lifetime, UnsupportedOperation
only for that launch), each batch falls back to RunInstances (MinCount 1) over the same
type x subnet list in order, moving on after a capacity error or a short answer.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.aws.adoption import adopt, tag_nodes
from clustermgr.providers.aws.capacity_reservations import (
    FULL_CODES,
    ON_DEMAND_SUFFIX,
    ReservationFactsCache,
    block_refusal,
    fallback_line,
    is_full,
    named,
    now,
    without_reservation,
)
from clustermgr.providers.aws.client import AwsClients
from clustermgr.providers.aws.cluster_groups import ClusterGroups, run_with_group, with_group
from clustermgr.providers.aws.efa import without_efa
from clustermgr.providers.aws.errors import (
    NO_FLEET_API_CODES,
    NOT_FOUND_CODES,
    SDK,
    SDK_ERRORS,
    classify,
)
from clustermgr.providers.aws.images import AwsMachineImages
from clustermgr.providers.aws.launch_templates import template_version
from clustermgr.providers.aws.objects import AwsObjectStorage
from clustermgr.providers.aws.shapes import (
    LIVE_STATES,
    Attempt,
    Launched,
    client_token,
    content_digest,
    fleet_errors,
    fleet_launched,
    fleet_request,
    from_launch,
    launch_template_data,
    launch_template_name,
    pair_unnamed,
    placements,
    root_device,
    run_launched,
    run_request,
    shortfall,
    tags_of,
    to_instance,
    to_instance_type,
    whole_fleet_request,
)
from clustermgr.providers.base import (
    TAG_CLUSTER,
    TAG_NODE,
    TAG_REQUEST,
    CloudInstance,
    InstanceType,
    LaunchError,
    LaunchResult,
    LaunchSpec,
    ReservationTarget,
    ours,
    short_whole,
)
from clustermgr.providers.launch_groups import PlacementGroup
from clustermgr.providers.reservations import ReservationFacts
from clustermgr.providers.skeleton import Check, CloudProvider

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

log = logging.getLogger(__name__)

PAGE_SIZE = 1000  # DescribeInstances MaxResults
FILTER_VALUES = 200  # EC2's limit on values in one filter
VALIDATION_TTL_S = 600.0
Bad = Callable[[str, str, str], ProviderError]  # (field, value, why) -> INVALID error


@dataclass(frozen=True)
class FleetPlan:
    """What every batch of one launch shares."""

    spec: LaunchSpec
    request_id: str
    count: int
    template: str  # launch template name
    version: int
    tags: dict[str, str]
    part: str = "b"  # the ClientToken's batch prefix ("f": the on-demand fallback's)
    group: str | None = None  # the launch's own cluster placement group (per-launch)

    def attempt(self, itype: str, place: Mapping[str, str], count: int, token: str) -> Attempt:
        return Attempt(self.template, self.version, itype, place, count, token, self.tags)


Launcher = Callable[[FleetPlan, list[LaunchError]], list[Launched]]


class AwsProvider(CloudProvider[FleetPlan]):
    kind: ClassVar[str] = "aws"
    sdk = SDK

    def __init__(self, settings: ProviderSettings, cluster: str) -> None:
        super().__init__(settings, cluster)
        self.clients = AwsClients(settings)
        self._lock = threading.Lock()
        self._fleet_api = True
        self._templates: dict[str, tuple[str, int]] = {}  # name -> (content digest, version)
        self._validated: dict[tuple[str, ...], float] = {}  # what -> valid until (monotonic)
        self._roots: dict[str, tuple[str, str, int]] = {}  # image -> its root_device()
        self._reserved = ReservationFactsCache(self._describe_reservations)
        self.groups = ClusterGroups(cluster, self.ec2, self.call)

    @classmethod
    def capabilities(cls, settings: ProviderSettings) -> Sequence[object]:
        """Machine-image copy and S3 (clustermgr.providers.capabilities), on one session."""
        clients = AwsClients(settings)
        return (AwsMachineImages(clients), AwsObjectStorage(clients))

    # ------------------------------------------------------------------ clients

    def ec2(self) -> EC2Client:
        return self.clients.ec2()

    def credential_source(self) -> str:
        return self.clients.credential_source()

    # ------------------------------------------------------------------ catalog

    def read_catalog(self) -> list[InstanceType]:
        def read() -> list[InstanceType]:
            pages = (
                self.ec2()
                .get_paginator("describe_instance_types")
                .paginate(PaginationConfig={"PageSize": 100})
            )
            return [to_instance_type(t) for page in pages for t in page["InstanceTypes"]]

        return sorted(self.call("listing instance types", read), key=lambda t: t.name)

    # ------------------------------------------------------------------ list

    def _ours(self, *more: dict[str, Any]) -> list[Any]:
        return [{"Name": f"tag:{TAG_CLUSTER}", "Values": [self.cluster]}, *more]

    def _describe(self, filters: list[Any]) -> Iterator[Mapping[str, Any]]:
        pages = (
            self.ec2()
            .get_paginator("describe_instances")
            .paginate(Filters=filters, PaginationConfig={"PageSize": PAGE_SIZE})
        )
        for page in pages:
            for reservation in page["Reservations"]:
                yield from reservation.get("Instances", [])

    def list_instances(self) -> dict[str, CloudInstance]:
        live = {"Name": "instance-state-name", "Values": list(LIVE_STATES)}

        def read() -> dict[str, CloudInstance]:
            found = (to_instance(item) for item in self._describe(self._ours(live)))
            return {inst.instance_id: inst for inst in found}

        return self.call(f"listing instances of cluster {self.cluster}", read)

    # ------------------------------------------------------------------ launch

    def prepare(self, spec: LaunchSpec, count: int, request_id: str) -> FleetPlan | None:
        if count <= 0:
            return None
        self._validate(spec, count)
        self._check_block(spec)
        template, version = self._ensure_template(spec)
        tags = ours(self.cluster, spec.template, request_id, spec.tags)
        group = self.groups.ensure(spec, count, request_id)  # the last step before launching
        return FleetPlan(spec, request_id, count, template, version, tags, group=group)

    def start(self, plan: FleetPlan, result: LaunchResult) -> None:
        adopted, rest = self._adopt(plan, result.errors) if plan.spec.resume else ([], plan)
        launched: list[Launched] = []
        if rest is None:  # a relaunch that found every instance it asked for
            pass
        elif rest.spec.all_or_nothing:
            launched = self._launch_whole(rest, result.errors)
            if not launched:  # a reservation that cannot hold the job: on-demand, whole
                launched = self._fallback(rest, 0, result.errors, self._launch_whole)
        else:
            launched = self._launch_batches(rest, result.errors)
            launched += self._fallback(rest, len(launched), result.errors, self._launch_batches)
        result.instances = self._bind(plan, adopted + launched, result.errors)
        if plan.group is not None and not result.instances:  # made for a launch of nothing
            self.groups.drop(PlacementGroup(plan.group, plan.group, plan.request_id))

    def _adopt(
        self, plan: FleetPlan, errors: list[LaunchError]
    ) -> tuple[list[Launched], FleetPlan | None]:
        """A relaunch: what carries the request's tag is adopted first (adoption.py).
        Returns (the instances adopted, the plan for what is missing: None for nothing)."""
        found = self._described(plan.request_id, errors).values()
        spec, request_id = plan.spec, plan.request_id
        got = adopt(found, spec.node_names[: plan.count], spec.all_or_nothing, request_id,
                    lambda ids: self.release(ids, request_id))  # fmt: skip
        rest = replace(plan, count=got.missing, part=plan.part + got.part)
        return got.keep, rest if got.missing else None

    def _token(self, plan: FleetPlan, part: str) -> str:
        """The ClientToken of one call: from the token base stored with the request (the
        request id for one issued before it was stored) and the call's part."""
        return client_token(self.cluster, plan.spec.client_token or plan.request_id, part)

    def _launch_whole(self, plan: FleetPlan, errors: list[LaunchError]) -> list[Launched]:
        """Each instance type x subnet in order, one fleet of all the nodes or none; what a
        short answer started is released before the next attempt (what cannot be released
        is returned, for the engine to terminate as failed)."""
        spec = plan.spec
        choices = [(t, p) for t in spec.instance_types for p in placements(spec)]
        for attempt, (itype, place) in enumerate(choices):
            if not self._fleet_api:
                got, failed = self._run_batch(plan, plan.count, f"{plan.part}w")  # MinCount
                errors.extend(failed)
                return got
            token = self._token(plan, f"{plan.part}w{attempt}")
            request = with_group(
                whole_fleet_request(spec, plan.attempt(itype, place, plan.count, token)),
                plan.group,
            )
            where = place.get("SubnetId") or place.get("AvailabilityZone")
            try:
                answer = self.ec2().create_fleet(**request)
            except SDK_ERRORS as exc:
                failure = self.failure(exc)
                if failure.code in NO_FLEET_API_CODES or failure.status == 501:
                    self._fleet_api = failure.code == "UnsupportedOperation"
                    got, failed = self._run_batch(plan, plan.count, f"{plan.part}w")
                    errors.extend(failed)
                    return got
                errors.append(failure.launch_error(itype, where, plan.count))
                if failure.kind is not ErrorKind.CAPACITY:
                    return []
                continue
            got = fleet_launched(answer)
            if len(got) >= plan.count:
                return got
            shortfall = fleet_errors(answer, plan.count - len(got))
            errors.extend(shortfall)
            if got:
                left = self.release([g.instance_id for g in got], plan.request_id)
                errors.append(short_whole(len(got), plan.count, itype, where, not left))
                if left:
                    return [g for g in got if g.instance_id in left]
            if not any(e.kind is ErrorKind.CAPACITY for e in shortfall):
                return []
        return []

    def _launch_batches(self, plan: FleetPlan, errors: list[LaunchError]) -> list[Launched]:
        size, count = self.clients.options.launch_batch_size, plan.count
        launched: list[Launched] = []
        for index, start in enumerate(range(0, count, size)):
            wanted = min(size, count - start)
            got, failed = self._launch_batch(plan, wanted, f"{plan.part}{index}")
            launched.extend(got)
            errors.extend(failed)
            if not got:  # nothing at all started: later batches would only fail the same way
                break
        return list({lnch.instance_id: lnch for lnch in launched}.values())

    def _launch_batch(
        self, plan: FleetPlan, wanted: int, part: str
    ) -> tuple[list[Launched], list[LaunchError]]:
        if not self._fleet_api:
            return self._run_batch(plan, wanted, part)
        token = self._token(plan, part)
        request = fleet_request(plan.spec, plan.template, plan.version, wanted, token, plan.tags)
        request = with_group(request, plan.group)
        try:
            answer = self.ec2().create_fleet(**request)
        except SDK_ERRORS as exc:
            failure = self.failure(exc)
            if failure.code in NO_FLEET_API_CODES or failure.status == 501:
                if failure.code != "UnsupportedOperation":
                    self._fleet_api = False
                log.info("CreateFleet not offered (%s): using RunInstances", failure.code)
                return self._run_batch(plan, wanted, part)
            return [], [failure.launch_error(count=wanted)]
        got = fleet_launched(answer)
        return got, fleet_errors(answer, max(0, wanted - len(got)))

    def _run_batch(
        self, plan: FleetPlan, wanted: int, part: str
    ) -> tuple[list[Launched], list[LaunchError]]:
        """RunInstances over each type x place in order until `wanted` started."""
        spec = plan.spec
        got: list[Launched] = []
        errors: list[LaunchError] = []
        choices = [(t, p) for t in spec.instance_types for p in placements(spec)]
        for attempt, (itype, place) in enumerate(choices):
            missing = wanted - len(got)
            if missing <= 0:
                break
            token = self._token(plan, f"{part}r{attempt}")
            request = run_with_group(
                run_request(spec, plan.attempt(itype, place, missing, token)), plan.group
            )
            try:
                answer = self.ec2().run_instances(**request)
            except SDK_ERRORS as exc:
                failure = self.failure(exc)
                errors.append(failure.launch_error(itype, place.get("AvailabilityZone"), missing))
                if failure.kind is not ErrorKind.CAPACITY:
                    break
                continue
            got.extend(run_launched(answer))
        if len(got) < wanted and not errors:
            errors.extend(fleet_errors({}, wanted - len(got)))
        return got, shortfall(errors, wanted - len(got))

    # ------------------------------------------------------------------ reservations

    def _describe_reservations(self, ids: list[str]) -> list[Mapping[str, Any]]:
        answer = self.ec2().describe_capacity_reservations(CapacityReservationIds=ids)
        return list(answer.get("CapacityReservations", []))

    def _check_block(self, spec: LaunchSpec) -> None:
        """A Capacity Block only within its window: outside it, CAPACITY and no launch."""
        target = spec.reservation
        if target is None or target.kind != "capacity-block":
            return
        facts = self.call(
            f"describing capacity block {target.ref}", lambda: self._reserved.one(target.ref)
        )
        why = block_refusal(facts, now())
        if why is not None:
            raise ProviderError(
                ErrorKind.CAPACITY, why, provider=self.name, code="CapacityBlockNotActive"
            )

    def _fallback(
        self, plan: FleetPlan, held: int, errors: list[LaunchError], launch: Launcher
    ) -> list[Launched]:
        """What the reservation could not hold: on-demand (by `launch`: in batches, or whole
        for a job launched all or nothing), or its errors naming it."""
        target = plan.spec.reservation
        if target is None or held >= plan.count or not is_full(errors):
            return []
        if not target.fallback:
            errors[:] = named(errors, target)
            return []
        log.warning(fallback_line(target, held, plan.count, plan.request_id))
        spec = without_reservation(plan.spec)
        template, version = self._ensure_template(spec, ON_DEMAND_SUFFIX)
        rest = replace(
            plan, spec=spec, count=plan.count - held, template=template, version=version, part="f"
        )
        more: list[LaunchError] = []
        got = launch(rest, more)
        errors[:] = [e for e in errors if e.code not in FULL_CODES] + more
        return got

    def reservations(self, targets: Sequence[ReservationTarget]) -> list[ReservationFacts]:
        """The reservations and blocks the targets name (one DescribeCapacityReservations);
        a resource group's members are not listed (EC2 keeps them in Resource Groups)."""
        ids = sorted({t.ref for t in targets if t.kind in ("reservation", "capacity-block")})
        return self.call("describing capacity reservations", lambda: self._reserved.read(ids))

    # ------------------------------------------------------------------ placement groups

    def placement_groups(self) -> list[PlacementGroup]:
        return self.groups.listed()

    def delete_placement_group(self, group: PlacementGroup) -> bool:
        return bool(
            self.call(f"deleting placement group {group.name}", lambda: self.groups.delete(group))
        )

    # ------------------------------------------------------------------ validation

    def _validate(self, spec: LaunchSpec, count: int) -> None:
        """Raise INVALID (naming template and field) for what cannot work."""

        bad: Bad = functools.partial(self.bad, spec)
        self.need_names(spec, count)
        if not spec.instance_types:
            raise bad("instance_types", "", "no instance type given")
        if spec.market == "spot" and spec.max_spot_price is not None and spec.max_spot_price <= 0:
            raise bad("max_spot_price", str(spec.max_spot_price), "must be above zero")
        self._once(
            ("types", spec.fabric or "", *spec.instance_types), lambda: self._check_types(spec, bad)
        )
        if not spec.image.startswith("resolve:ssm:"):  # resolved by EC2 at launch
            self._once(("image", spec.image), lambda: self._check_image(spec, bad))
        if spec.root_volume_gb is not None:
            self._check_root_volume(spec, bad)

    def _check_root_volume(self, spec: LaunchSpec, bad: Bad) -> None:
        """The size goes on the image's root device, which DescribeImages names."""
        size = str(spec.root_volume_gb)
        if spec.image.startswith("resolve:ssm:"):
            why = "needs an AMI id (its root device comes from DescribeImages), not resolve:ssm:"
            raise bad("volume_size_gb", size, why)
        with self._lock:
            name, kind, snapshot_gb = self._roots.get(spec.image, ("", "ebs", 0))
        if kind != "ebs" or not name:
            raise bad("volume_size_gb", size, f"image {spec.image} has no EBS root volume")
        if spec.root_volume_gb is not None and spec.root_volume_gb < snapshot_gb:
            why = f"smaller than image {spec.image}'s root snapshot ({snapshot_gb} GB)"
            raise bad("volume_size_gb", size, why)

    def _once(self, key: tuple[str, ...], check: Callable[[], None]) -> None:
        with self._lock:
            until = self._validated.get(key, 0.0)
        if until > time.monotonic():
            return
        check()
        with self._lock:
            self._validated[key] = time.monotonic() + VALIDATION_TTL_S

    def _check_types(self, spec: LaunchSpec, bad: Bad) -> None:
        ec2 = self.ec2()
        try:
            answer = ec2.describe_instance_types(**_types(spec.instance_types))
        except SDK_ERRORS as exc:
            if classify(exc).kind is not ErrorKind.INVALID:
                raise self.error(exc, "describing instance types") from None
            self._find_bad_type(spec, bad)
            raise bad("instance_types", ",".join(spec.instance_types), "not all offered") from None
        known = {t["InstanceType"] for t in answer.get("InstanceTypes", [])}
        for itype in spec.instance_types:
            if itype not in known:
                raise bad("instance_types", itype, f"not an instance type offered in {self.region}")
        if spec.fabric == "efa":
            for itype in without_efa(answer.get("InstanceTypes", [])):
                why = "has no EFA (NetworkInfo.EfaSupported): efa = true needs an EFA type"
                raise bad("instance_types", itype, why)

    def _find_bad_type(self, spec: LaunchSpec, bad: Bad) -> None:
        for itype in spec.instance_types:
            try:
                self.ec2().describe_instance_types(**_types([itype]))
            except SDK_ERRORS as exc:
                failure = classify(exc)
                if failure.kind is ErrorKind.INVALID:
                    why = f"not an instance type offered in {self.region} ({failure.code})"
                    raise bad("instance_types", itype, why) from None
                raise self.error(failure, "describing instance types") from None

    def _check_image(self, spec: LaunchSpec, bad: Bad) -> None:
        try:
            images = self.ec2().describe_images(ImageIds=[spec.image]).get("Images", [])
        except SDK_ERRORS as exc:
            failure = classify(exc)
            if failure.kind is ErrorKind.INVALID:
                raise bad("image", spec.image, f"not found ({failure.code})") from None
            raise self.error(failure, f"describing image {spec.image}") from None
        if not images:
            raise bad("image", spec.image, "no such image visible to this account")
        state = images[0].get("State", "available")
        if state != "available":
            raise bad("image", spec.image, f"image state is {state}")
        with self._lock:
            self._roots[spec.image] = root_device(images[0])

    # ------------------------------------------------------------------ launch template

    def _ensure_template(self, spec: LaunchSpec, suffix: str = "") -> tuple[str, int]:
        name = launch_template_name(self.cluster, spec.template + suffix)
        with self._lock:
            root = self._roots.get(spec.image, ("", "", 0))[0]
        data = launch_template_data(spec, root)
        digest = content_digest(data)
        with self._lock:
            cached = self._templates.get(name)
        if cached is not None and cached[0] == digest:
            return name, cached[1]
        version = self.call(
            f"preparing launch template {name}",
            lambda: template_version(self.ec2(), self.cluster, spec, name, data, digest),
        )
        with self._lock:
            self._templates[name] = (digest, version)
        return name, version

    # ------------------------------------------------------------------ binding

    def _bind(
        self, plan: FleetPlan, launched: list[Launched], errors: list[LaunchError]
    ) -> list[CloudInstance]:
        """Name each instance after a node, in order; instances named before keep their name."""
        if not launched:
            return []
        described = self._described(plan.request_id, errors)
        names: dict[str, str] = {}
        for lnch in launched:
            name = tags_of(described.get(lnch.instance_id, {})).get(TAG_NODE)
            if name:
                names[lnch.instance_id] = name
        taken = set(names.values())
        free = iter(n for n in plan.spec.node_names[: plan.count] if n not in taken)
        wanted = [(lnch.instance_id, name) for lnch, name in pair_unnamed(launched, names, free)]
        failed = self._tag_nodes(wanted, errors)
        names.update((iid, name) for iid, name in wanted if iid not in failed)
        return [
            self._bound(lnch, described, plan.tags, names.get(lnch.instance_id))
            for lnch in launched
        ]

    def _described(
        self, request_id: str, errors: list[LaunchError]
    ) -> dict[str, Mapping[str, Any]]:
        mine = {"Name": f"tag:{TAG_REQUEST}", "Values": [request_id]}
        try:
            return {item["InstanceId"]: item for item in self._describe(self._ours(mine))}
        except SDK_ERRORS as exc:
            errors.append(self.failure(exc).launch_error())
            return {}

    @staticmethod
    def _bound(
        lnch: Launched,
        described: dict[str, Mapping[str, Any]],
        tags: dict[str, str],
        name: str | None,
    ) -> CloudInstance:
        item = described.get(lnch.instance_id)
        inst = to_instance(item) if item is not None else from_launch(lnch, tags)
        if name is None:
            return inst
        return replace(inst, node_name=name, tags={**inst.tags, TAG_NODE: name})

    def _tag_nodes(self, pairs: list[tuple[str, str]], errors: list[LaunchError]) -> set[str]:
        """One CreateTags per instance (node name and Name); the ids that failed."""
        return tag_nodes(self.ec2, self.failure, pairs, errors)

    # ------------------------------------------------------------------ terminate

    def remove(self, wanted: list[str], request_id: str) -> None:
        mine = self.call("looking up instances to terminate", lambda: self._live_ours(wanted))
        if len(mine) < len(wanted):
            log.info(
                "request %s: %d of %d instance(s) already gone or not tagged for cluster %s",
                request_id,
                len(wanted) - len(mine),
                len(wanted),
                self.cluster,
            )
        size = self.clients.options.terminate_batch_size
        for start in range(0, len(mine), size):
            self._terminate_batch(mine[start : start + size])

    def _live_ours(self, ids: list[str]) -> list[str]:
        """Which of `ids` are live instances tagged as ours, in the order given."""
        live = {"Name": "instance-state-name", "Values": list(LIVE_STATES)}
        found: set[str] = set()
        for start in range(0, len(ids), FILTER_VALUES):
            chunk = {"Name": "instance-id", "Values": ids[start : start + FILTER_VALUES]}
            found.update(item["InstanceId"] for item in self._describe(self._ours(live, chunk)))
        return [i for i in ids if i in found]

    def _terminate_batch(self, batch: list[str]) -> None:
        ec2 = self.ec2()
        for last in (False, True):
            try:
                ec2.terminate_instances(InstanceIds=batch)
                return
            except SDK_ERRORS as exc:
                if classify(exc).code not in NOT_FOUND_CODES:
                    raise self.error(exc, f"terminating {len(batch)} instance(s)") from None
                if last:
                    return
            # one of them vanished between the lookup and the call: look again, once
            batch = self.call(
                "looking up instances to terminate", functools.partial(self._live_ours, batch)
            )
            if not batch:
                return

    # ------------------------------------------------------------------ check

    def check_credentials(self) -> str:
        identity = self.clients.sts().get_caller_identity()
        account = identity.get("Account", "?")
        return f"credentials accepted ({self.credential_source()}), account {account}"

    def _check_region(self) -> str:
        region: dict[str, Any] = {"Filters": [{"Name": "region-name", "Values": [self.region]}]}
        zones = self.ec2().describe_availability_zones(**region).get("AvailabilityZones", [])
        if not zones:
            raise ProviderError(ErrorKind.INVALID, f"no availability zones in {self.region}")
        return f"region {self.region} reachable ({len(zones)} zones)"

    def _check_describe(self) -> str:
        answer = self.ec2().describe_instances(Filters=self._ours(), MaxResults=5)
        seen = sum(len(r.get("Instances", [])) for r in answer.get("Reservations", []))
        return f"DescribeInstances allowed ({seen} of this cluster's on the first page)"

    def checks(self) -> list[Check]:
        return [("region", self._check_region), ("describe permission", self._check_describe)]


def _types(names: Sequence[str]) -> dict[str, Any]:
    return {"InstanceTypes": list(names)}

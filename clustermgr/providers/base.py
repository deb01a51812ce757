"""The provider seam: one small Protocol and the typed data that crosses it.

A provider talks to one cloud region. It only ever lists, launches and terminates
instances tagged as this cluster's. Launches are idempotent per request id: the same
request id twice never makes a second instance.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, runtime_checkable

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.core.reasons import Reason

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

# Tag keys every instance we launch carries. Letters, digits and '-' only, so the same
# keys are valid as EC2 tags (and readable through IMDS), Azure tags and Nova metadata.
TAG_CLUSTER = "clustermgr-cluster"
TAG_TEMPLATE = "clustermgr-template"
TAG_REQUEST = "clustermgr-request"
TAG_NODE = "clustermgr-node"
# an on-prem node's listing: its BMC's fault an admin must fix (`(Code:KIND) detail`)
TAG_FAULT = "clustermgr-fault"
# The first line of user data that carries a director's facts (directors/userdata.py
# writes them; a provider that runs directors itself, the local one, reads them).
DIRECTOR_MARK = "#clustermgr-director"

Market = Literal["on-demand", "spot"]


class InstanceState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    TERMINATED = "terminated"
    ERROR = "error"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ReservationTarget:
    """Reserved capacity a launch goes into (a template's capacity_reservation or
    capacity_reservation_group): `ref` is the reservation or block id, the resource group's
    ARN, or the Azure group's resource id or name. `fallback`: what the reservation cannot
    hold is launched on-demand (else it fails, naming the reservation)."""

    kind: Literal["reservation", "capacity-block", "resource-group", "group"]
    ref: str
    preference: Literal["open", "targeted"] = "targeted"
    fallback: bool = True


@dataclass(frozen=True)
class LaunchSpec:
    """What to launch for one template. `node_names` binds instances to Slurm names in order."""

    template: str
    instance_types: tuple[str, ...]
    image: str
    node_names: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    market: Market = "on-demand"
    max_spot_price: float | None = None
    # carries the launch's one-time munge-key token: kept out of reprs (logs, tracebacks)
    user_data: str = field(default="", repr=False)
    tags: Mapping[str, str] = field(default_factory=dict)
    instance_profile: str | None = None
    placement_group: str | None = None
    key_name: str | None = None
    network: str | None = None
    # the root (boot) volume in GB; None: the image's own size. AWS: an EBS mapping for the
    # image's root device; Azure: osDisk.diskSizeGB; OpenStack: boot from a new volume
    root_volume_gb: int | None = None
    reservation: ReservationTarget | None = None
    # the template's fabric: "efa" (AWS: an EFA interface), "infiniband" (Azure: an RDMA
    # size, accelerated networking), "sriov" (OpenStack: a port with vnic_type direct)
    fabric: Literal["efa", "infiniband", "sriov"] | None = None
    # placement = "per-launch": a compact placement group of this launch's own, made when it
    # has 2 or more instances (providers/launch_groups.py); the policy is OpenStack's server
    # group policy (AWS makes a cluster placement group, Azure a proximity placement group)
    launch_group: Literal["affinity", "soft-affinity"] | None = None
    # all of `count` start or none does (one job's nodes): a short answer is released at
    # once and the launch tried whole on the next type or zone
    all_or_nothing: bool = False
    # the base the cloud's idempotency tokens derive from (EC2 ClientToken); None: the
    # request id. Stored with the request when it was issued, so a relaunch replays it
    client_token: str | None = None
    # a relaunch of a request an earlier process issued (a crash, a takeover): the
    # instances that carry the request's tag are adopted first and only what is missing is
    # created, so a cloud that ignores idempotency tokens still starts no duplicate
    resume: bool = False


@dataclass(frozen=True)
class CloudInstance:
    instance_id: str
    node_name: str | None
    state: InstanceState
    private_address: str | None
    instance_type: str
    zone: str | None
    lifecycle: Market
    launch_time: datetime | None
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def request_id(self) -> str | None:
        return self.tags.get(TAG_REQUEST)

    @property
    def fault(self) -> str | None:
        """An on-prem node's BMC fault an admin must fix (credentials rejected, no such
        system): `(Code:KIND) detail`, on a listing whose state is UNKNOWN."""
        return self.tags.get(TAG_FAULT)

    @property
    def template(self) -> str | None:
        return self.tags.get(TAG_TEMPLATE)


@dataclass(frozen=True)
class LaunchError:
    """One part of a launch that failed; the rest of the launch may have succeeded."""

    kind: ErrorKind
    code: str
    message: str
    instance_type: str | None = None
    zone: str | None = None
    count: int = 0

    def reason(self) -> str:
        """The Slurm node reason: `(Code:KIND) detail`."""
        return str(Reason(self.kind.value, f"{self.code}: {self.message}"))


ALL_OR_NOTHING = "AllOrNothing"  # the code of an all-or-nothing launch that came back short


def short_whole(
    got: int,
    wanted: int,
    instance_type: str | None = None,
    zone: str | None = None,
    released: bool = True,
) -> LaunchError:
    """The CAPACITY error of an all-or-nothing launch (or one attempt of it, on one type and
    zone) that got `got` of `wanted` instances."""
    where = " ".join(w for w in (instance_type, zone) if w)
    fate = "released" if released else "release failed: the engine terminates them"
    message = f"all-or-nothing: got {got} of {wanted}{f' on {where}' if where else ''}, {fate}"
    return LaunchError(ErrorKind.CAPACITY, ALL_OR_NOTHING, message, instance_type, zone, wanted)


@dataclass
class LaunchResult:
    request_id: str
    requested: int
    instances: list[CloudInstance] = field(default_factory=list)
    errors: list[LaunchError] = field(default_factory=list)

    @property
    def missing(self) -> int:
        return max(0, self.requested - len(self.instances))

    @property
    def ok(self) -> bool:
        return self.missing == 0


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_mb: int
    gpu_model: str | None = None
    gpu_count: int = 0
    gpu_memory_mb: int = 0
    architecture: str = "x86_64"
    # the fabrics the type can carry ("efa", "infiniband"); None: the catalog does not say
    # (an OpenStack flavor: SR-IOV is the network's and the host's, not the flavor's)
    fabrics: frozenset[str] | None = None


@dataclass(frozen=True)
class CheckResult:
    """One line of `clustermgr providers check`."""

    name: str
    ok: bool
    detail: str


@runtime_checkable
class Provider(Protocol):
    kind: ClassVar[str]
    name: str

    def list_instances(self) -> dict[str, CloudInstance]:
        """Every instance tagged with this cluster's name, keyed by instance id."""
        ...

    def launch(self, spec: LaunchSpec, count: int, request_id: str) -> LaunchResult:
        """Start up to `count` instances; never raises for capacity, returns errors instead.

        Raises ProviderError(INVALID) before launching anything when the spec names an
        unknown instance type or image, and ProviderError(AUTH) when credentials fail.
        """
        ...

    def terminate(self, instance_ids: Sequence[str], request_id: str) -> None:
        """Terminate instances; already-gone instances are not an error."""
        ...

    def catalog(self) -> Sequence[InstanceType]:
        """Instance types this region offers (vCPUs, memory, GPUs)."""
        ...

    def check(self) -> list[CheckResult]:
        """Credentials and reachability, one result per check; never raises."""
        ...


class ProviderFactory(Protocol):
    kind: ClassVar[str]

    def __call__(self, settings: ProviderSettings, cluster: str) -> Provider: ...


def ours(cluster: str, template: str, request_id: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The tags every launched instance carries."""
    return {**extra, TAG_CLUSTER: cluster, TAG_TEMPLATE: template, TAG_REQUEST: request_id}


def invalid(provider: str, template: str, field_name: str, value: str, why: str) -> ProviderError:
    """An INVALID error that names the template and the field, raised before any launch."""
    return ProviderError(
        ErrorKind.INVALID,
        f"template {template!r} field {field_name} = {value!r}: {why}",
        provider=provider,
        code="InvalidSpec",
    )

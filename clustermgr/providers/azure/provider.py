"""Azure provider: single VMs (each with its own NIC) in one resource group and region.

Only client.py and errors.py import the Azure SDK. Every VM
carries our tags; list/terminate only ever touch VMs tagged with this cluster's name.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from clustermgr.config import ProviderSettings
from clustermgr.errors import ErrorKind, ProviderError
from clustermgr.providers.azure.client import AzureClients
from clustermgr.providers.azure.errors import SDK, SDK_ERRORS, classify, is_not_found
from clustermgr.providers.azure.kind import AzureOptions
from clustermgr.providers.azure.shapes import (
    Names,
    VmRequest,
    image_reference,
    instance_state,
    instance_tags,
    instance_type_of,
    names_for,
    names_of,
    nic_body,
    vm_body,
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
)
from clustermgr.providers.skeleton import Check, CloudProvider, Failure, Words, parallel

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.network import NetworkManagementClient

log = logging.getLogger(__name__)

MANAGEMENT_SCOPE = "https://management.azure.com/.default"
MAX_WORKERS = 16  # concurrent VM creations / deletions per call
T = TypeVar("T")
Bad = Callable[[str, str, str], ProviderError]  # (field, value, why) -> INVALID error


@dataclass(frozen=True)
class VmPlan:
    """What validation found for one launch: the nodes to give a VM each, and their SSH key."""

    spec: LaunchSpec
    request_id: str
    nodes: tuple[str, ...]
    ssh_public_key: str


@dataclass
class NodeOutcome:
    instance: CloudInstance | None = None
    errors: list[LaunchError] = field(default_factory=list)


class AzureProvider(CloudProvider[VmPlan]):
    kind: ClassVar[str] = "azure"
    sdk = SDK
    words = Words("VM", "VM size", credential_check="token")

    def __init__(self, settings: ProviderSettings, cluster: str) -> None:
        super().__init__(settings, cluster)
        self.resource_group = settings.options_as(AzureOptions).resource_group
        self.clients = AzureClients(settings, pool_size=MAX_WORKERS + 4)

    def credential_source(self) -> str:
        return self.clients.credential_source()

    def credential(self) -> TokenCredential:
        return self.clients.credential()

    def compute(self) -> ComputeManagementClient:
        return self.clients.compute()

    def network(self) -> NetworkManagementClient:
        return self.clients.network()

    # ------------------------------------------------------------------ catalog

    def read_catalog(self) -> list[InstanceType]:
        compute = self.compute()
        skus = self.call(
            "listing resource SKUs",
            lambda: list(compute.resource_skus.list(filter=f"location eq '{self.region}'")),
        )
        found = {t.name: t for t in (instance_type_of(s, self.region) for s in skus) if t}
        return sorted(found.values(), key=lambda t: t.name)

    # ------------------------------------------------------------------ list

    def list_instances(self) -> dict[str, CloudInstance]:
        compute, network = self.compute(), self.network()
        vms = self.call(
            f"listing VMs in resource group {self.resource_group}",
            lambda: list(compute.virtual_machines.list(self.resource_group, expand="instanceView")),
        )
        ours = [vm for vm in vms if (vm.tags or {}).get(TAG_CLUSTER) == self.cluster]
        if not ours:
            return {}
        nics = self.call(
            f"listing network interfaces in resource group {self.resource_group}",
            lambda: list(network.network_interfaces.list(self.resource_group)),
        )
        addresses = {str(nic.id).lower(): _private_ip(nic) for nic in nics}
        instances = (self._instance(vm, addresses) for vm in ours)
        return {inst.instance_id: inst for inst in instances}

    def _instance(self, vm: Any, addresses: dict[str, str | None]) -> CloudInstance:
        tags = dict(vm.tags or {})
        nic_refs = getattr(vm.network_profile, "network_interfaces", None) or []
        address = next((addresses.get(str(r.id).lower()) for r in nic_refs), None)
        view = getattr(vm, "instance_view", None)
        statuses = [str(s.code) for s in (getattr(view, "statuses", None) or []) if s.code]
        created = getattr(vm, "time_created", None)
        return CloudInstance(
            instance_id=str(vm.name),
            node_name=tags.get(TAG_NODE),
            state=instance_state(vm.provisioning_state, statuses),
            private_address=address,
            instance_type=_text(vm.hardware_profile.vm_size) if vm.hardware_profile else "",
            zone=(list(vm.zones or []) or [None])[0],
            lifecycle="spot" if _text(vm.priority).lower() == "spot" else "on-demand",
            launch_time=created if isinstance(created, datetime) else _parse_time(created),
            tags=tags,
        )

    # ------------------------------------------------------------------ launch

    def prepare(self, spec: LaunchSpec, count: int, request_id: str) -> VmPlan | None:
        key = self._validate(spec, count)
        nodes = spec.node_names[:count]
        return VmPlan(spec, request_id, nodes, key) if nodes else None

    def start(self, plan: VmPlan, result: LaunchResult) -> None:
        spec, request_id, key = plan.spec, plan.request_id, plan.ssh_public_key
        outcomes = self._parallel(lambda n: self._launch_node(spec, n, request_id, key), plan.nodes)
        for outcome in outcomes:
            if outcome.instance is not None:
                result.instances.append(outcome.instance)
            result.errors.extend(outcome.errors)

    def _validate(self, spec: LaunchSpec, count: int) -> str:
        """Raise INVALID (naming template and field) for what cannot work; the SSH key."""
        bad: Bad = functools.partial(self.bad, spec)
        self.need_names(spec, count)
        if not spec.subnets:
            raise bad("subnets", "", "an Azure template needs a subnet resource id")
        known = {t.name.lower() for t in self.catalog()}
        for itype in spec.instance_types:
            if itype.lower() not in known:
                raise bad("instance_types", itype, f"not a VM size offered in {self.region}")
        subnet = _subnet_parts(spec.subnets[0])
        if subnet is None:
            raise bad("subnets", spec.subnets[0], "not a .../virtualNetworks/V/subnets/S id")
        network = self.network()
        self._lookup(bad, "subnets", spec.subnets[0], lambda: network.subnets.get(*subnet))
        ref = image_reference(spec.image)
        if ref is None:
            why = "use publisher:offer:sku:version, a managed image or a gallery image version id"
            raise bad("image", spec.image, why)
        if not self._lookup(bad, "image", spec.image, lambda: self._image_exists(ref)):
            raise bad("image", spec.image, "no version of this image")
        return self._ssh_public_key(spec, bad)

    def _lookup(self, bad: Bad, field_name: str, value: str, fn: Callable[[], T]) -> T:
        """fn() reads something the spec names; not found -> INVALID naming the field."""
        try:
            return fn()
        except SDK_ERRORS as exc:
            if is_not_found(exc):
                raise bad(field_name, value, f"not found ({classify(exc).code})") from None
            raise self.error(exc, f"looking up {field_name} {value}") from None

    def _image_exists(self, ref: dict[str, str]) -> bool:
        compute = self.compute()
        if "id" not in ref:
            pub, offer, sku, version = ref["publisher"], ref["offer"], ref["sku"], ref["version"]
            if version.lower() == "latest":
                images = compute.virtual_machine_images.list(self.region, pub, offer, sku, top=1)
                return bool(images)
            compute.virtual_machine_images.get(self.region, pub, offer, sku, version)
            return True
        segs = [s for s in ref["id"].split("/") if s]
        low = [s.lower() for s in segs]
        group = segs[low.index("resourcegroups") + 1]
        if "galleries" in low:
            at = low.index("galleries")
            compute.gallery_image_versions.get(group, segs[at + 1], segs[at + 3], segs[at + 5])
        else:
            compute.images.get(group, segs[low.index("images") + 1])
        return True

    def _ssh_public_key(self, spec: LaunchSpec, bad: Bad) -> str:
        """The admin user's SSH key: `key_name` (an SSH public key resource in the resource
        group, or the key text itself), else a key generated here whose private half is
        discarded (log in through your image / user-data instead)."""
        key = spec.key_name
        if key and key.startswith(("ssh-", "ecdsa-")):
            return key
        if key:
            compute = self.compute()
            found = self._lookup(
                bad, "key_name", key, lambda: compute.ssh_public_keys.get(self.resource_group, key)
            )
            return str(found.public_key)
        return _throwaway_ssh_key()

    def _launch_node(self, spec: LaunchSpec, node: str, request_id: str, key: str) -> NodeOutcome:
        """One node: reuse its VM from an earlier try, else create it (type/zone fallback)."""
        try:
            return self._launch_node_once(spec, node, request_id, key)
        except ProviderError as exc:
            if exc.kind is ErrorKind.AUTH:
                raise
            return NodeOutcome(errors=[LaunchError(exc.kind, exc.code, str(exc), count=1)])

    def _launch_node_once(
        self, spec: LaunchSpec, node: str, request_id: str, key: str
    ) -> NodeOutcome:
        names = names_for(self.cluster, node, request_id)
        existing = self._get_vm(names.vm)
        if existing is not None:
            reused = self._reuse(existing, request_id, names)
            if reused is not None:
                return reused
        tags = instance_tags(self.cluster, spec, request_id, node)
        outcome = NodeOutcome()
        for itype in spec.instance_types:
            for zone in spec.zones or (None,):
                req = VmRequest(self.region, names, "", itype, zone, tags, key)
                instance, failure = self._attempt(spec, req)
                if instance is not None:
                    outcome.instance = instance
                    return outcome
                if failure is not None:
                    outcome.errors.append(failure.launch_error(itype, zone, count=1))
                    if failure.kind is not ErrorKind.CAPACITY:
                        return self._give_up(names, outcome)
        return self._give_up(names, outcome)

    def _attempt(
        self, spec: LaunchSpec, req: VmRequest
    ) -> tuple[CloudInstance | None, Failure | None]:
        """One VM creation of one size (in one zone). The NIC is (re)made first: deleting a
        failed VM also deletes its NIC (delete option Delete)."""
        try:
            nic = self._ensure_nic(spec, req.names, dict(req.tags))
        except SDK_ERRORS as exc:
            return None, self.failure(exc)
        try:
            vm = self._create_vm(spec, replace(req, nic_id=str(nic.id)))
        except SDK_ERRORS as exc:
            failure = self.failure(exc)
            self._discard_failed_vm(req.names.vm)
            return None, failure
        return self._instance(vm, {str(nic.id).lower(): _private_ip(nic)}), None

    def _reuse(self, vm: Any, request_id: str, names: Names) -> NodeOutcome | None:
        """A VM of this name exists already: reuse it (same request), or report why not."""
        state = _text(vm.provisioning_state).lower()
        if (vm.tags or {}).get(TAG_REQUEST) != request_id:
            message = f"VM {names.vm} exists for request {(vm.tags or {}).get(TAG_REQUEST)}"
            return NodeOutcome(errors=[LaunchError(ErrorKind.OTHER, "NameInUse", message)])
        if state == "failed":
            self._discard_failed_vm(names.vm)
            return None
        if state == "deleting":
            message = f"VM {names.vm} is being deleted"
            return NodeOutcome(errors=[LaunchError(ErrorKind.TRANSIENT, "Deleting", message)])
        network = self.network()
        nic = self.call(
            "reading NIC", lambda: network.network_interfaces.get(self.resource_group, names.nic)
        )
        return NodeOutcome(instance=self._instance(vm, {str(nic.id).lower(): _private_ip(nic)}))

    def _get_vm(self, name: str) -> Any | None:
        compute = self.compute()
        try:
            return compute.virtual_machines.get(self.resource_group, name)
        except SDK_ERRORS as exc:
            if is_not_found(exc):
                return None
            raise self.error(exc, f"reading VM {name}") from None

    def _ensure_nic(self, spec: LaunchSpec, names: Names, tags: dict[str, str]) -> Any:
        nsg = spec.security_groups[0] if spec.security_groups else None
        body: Any = nic_body(self.region, spec.subnets[0], tags, nsg)  # ARM JSON, any SDK
        poller = self.network().network_interfaces.begin_create_or_update(
            self.resource_group, names.nic, body
        )
        return poller.result()

    def _create_vm(self, spec: LaunchSpec, req: VmRequest) -> Any:
        body: Any = vm_body(spec, req)  # ARM JSON: accepted by old and new SDK models alike
        poller = self.compute().virtual_machines.begin_create_or_update(
            self.resource_group, req.names.vm, body
        )
        return poller.result()

    def _discard_failed_vm(self, name: str) -> None:
        """A failed creation can leave a VM in provisioningState Failed: delete it."""
        try:
            self.compute().virtual_machines.begin_delete(self.resource_group, name).result()
        except SDK_ERRORS as exc:
            if not is_not_found(exc):
                log.warning("could not delete failed VM %s: %s", name, classify(exc).message)

    def _give_up(self, names: Names, outcome: NodeOutcome) -> NodeOutcome:
        self._delete_leftovers(names)
        return outcome

    # ------------------------------------------------------------------ terminate

    def remove(self, ids: list[str], request_id: str) -> None:
        failures = [f for f in self._parallel(self._terminate_one, ids) if f is not None]
        if failures:
            raise failures[0]

    def _terminate_one(self, vm_name: str) -> ProviderError | None:
        try:
            self.compute().virtual_machines.begin_delete(self.resource_group, vm_name).result()
        except SDK_ERRORS as exc:
            if not is_not_found(exc):
                return self.error(exc, f"deleting VM {vm_name}")
        self._delete_leftovers(names_of(vm_name))
        return None

    def _delete_leftovers(self, names: Names) -> None:
        """The NIC and OS disk go with the VM (delete option Delete); make sure of it."""
        steps: list[tuple[str, Callable[[], Any]]] = [
            (
                names.nic,
                lambda: self.network().network_interfaces.begin_delete(
                    self.resource_group, names.nic
                ),
            ),
            (
                names.os_disk,
                lambda: self.compute().disks.begin_delete(self.resource_group, names.os_disk),
            ),
        ]
        for what, start in steps:
            try:
                start().result()
            except SDK_ERRORS as exc:
                if not is_not_found(exc):
                    log.warning("could not delete %s: %s", what, classify(exc).message)

    # ------------------------------------------------------------------ check

    def check_credentials(self) -> str:
        self.credential().get_token(MANAGEMENT_SCOPE)
        return f"token acquired ({self.credential_source()})"

    def checks(self) -> list[Check]:
        return [("resource group", self._check_group), ("resource SKUs", self.check_catalog)]

    def _check_group(self) -> str:
        compute = self.compute()
        pages = compute.virtual_machines.list(self.resource_group).by_page()
        first = list(next(iter(pages), []))
        return f"resource group {self.resource_group} reachable ({len(first)} VMs on first page)"

    # ------------------------------------------------------------------ helpers

    def _parallel(self, fn: Callable[[str], T], items: Sequence[str]) -> list[T]:
        return parallel(fn, items, MAX_WORKERS, "azure")


def _subnet_parts(subnet_id: str) -> tuple[str, str, str] | None:
    """(resource group, virtual network, subnet) of a subnet resource id."""
    segs = [s for s in subnet_id.split("/") if s]
    low = [s.lower() for s in segs]
    try:
        group = segs[low.index("resourcegroups") + 1]
        vnet = segs[low.index("virtualnetworks") + 1]
        subnet = segs[low.index("subnets") + 1]
    except (ValueError, IndexError):
        return None
    return group, vnet, subnet


def _private_ip(nic: Any) -> str | None:
    for config in getattr(nic, "ip_configurations", None) or []:
        if config.private_ip_address:
            return str(config.private_ip_address)
    return None


def _text(value: Any) -> str:
    """SDK enums are str subclasses; take their value."""
    return str(getattr(value, "value", value) or "")


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


@functools.cache
def _throwaway_ssh_key() -> str:
    """One per process: an RSA public key whose private half is never kept."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return public.decode("ascii") + " clustermgr-no-login"

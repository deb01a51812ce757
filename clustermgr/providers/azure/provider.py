"""Azure provider: single VMs (each with its own NIC) in one resource group and region.

Only client.py and errors.py import the Azure SDK. Every VM
carries our tags; list/terminate only ever touch VMs tagged with this cluster's name.
Each attempt at a VM gets a NIC of its own; NICs no VM uses are deleted until they go
(nics.py). The catalog leaves out sizes restricted in the region for this subscription,
and a launch skips the zones a size is restricted in and, for spot, the sizes that are not
LowPriorityCapable. Power state comes from the subscription's `statusOnly=true` listing:
a resource group's listing returns no instance view without a `$filter`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from clustermgr.config import ProviderSettings
from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.azure.client import AzureClients
from clustermgr.providers.azure.errors import (
    SDK,
    SDK_ERRORS,
    classify,
    family_quota,
    is_not_found,
)
from clustermgr.providers.azure.gallery import AzureMachineImages
from clustermgr.providers.azure.infiniband import with_accelerated_networking
from clustermgr.providers.azure.kind import AzureOptions
from clustermgr.providers.azure.nics import NicJanitor
from clustermgr.providers.azure.proximity_groups import ProximityGroups
from clustermgr.providers.azure.reservation_groups import (
    beyond_line,
    free_for,
    group_id,
    group_parts,
    held_back,
    resolved,
    to_facts,
    whole_group,
)
from clustermgr.providers.azure.resources import (
    enum_text,
    id_name,
    nic_refs,
    parse_time,
    private_ip,
    subnet_parts,
    throwaway_ssh_key,
)
from clustermgr.providers.azure.shapes import (
    Names,
    SkuFacts,
    VmRequest,
    fresh_nic_name,
    image_reference,
    instance_state,
    instance_tags,
    instance_type_of,
    names_for,
    names_of,
    nic_body,
    nic_tags,
    sku_facts,
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
    ReservationTarget,
    short_whole,
)
from clustermgr.providers.launch_groups import PlacementGroup
from clustermgr.providers.reservations import ReservationFacts
from clustermgr.providers.skeleton import Check, CloudProvider, Failure, Words, parallel

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.network import NetworkManagementClient

log = logging.getLogger(__name__)

MANAGEMENT_SCOPE = "https://management.azure.com/.default"
MAX_WORKERS = 16  # concurrent VM creations / deletions per call
NIC_RESERVED = "NicReservedForAnotherVm"
T = TypeVar("T")
Bad = Callable[[str, str, str], ProviderError]  # (field, value, why) -> INVALID error


@dataclass(frozen=True)
class VmPlan:
    """What validation found for one launch: the nodes to give a VM each, and their SSH key."""

    spec: LaunchSpec
    request_id: str
    nodes: tuple[str, ...]
    ssh_public_key: str
    held_back: LaunchError | None = None  # nodes a full reservation group does not launch


@dataclass
class NodeOutcome:
    instance: CloudInstance | None = None
    errors: list[LaunchError] = field(default_factory=list)


class AzureProvider(CloudProvider[VmPlan]):
    kind: ClassVar[str] = "azure"
    sdk = SDK
    words = Words("VM", "VM size", credential_check="token")

    @classmethod
    def capabilities(cls, settings: ProviderSettings) -> Sequence[object]:
        """Machine-image copy: a gallery image version replicated into the region."""
        return (AzureMachineImages(AzureClients(settings), settings.region),)

    def __init__(self, settings: ProviderSettings, cluster: str) -> None:
        super().__init__(settings, cluster)
        self.resource_group = settings.options_as(AzureOptions).resource_group
        self.subscription_id = settings.options_as(AzureOptions).subscription_id
        self.clients = AzureClients(settings, pool_size=MAX_WORKERS + 4)
        self.nics = NicJanitor(cluster, self.network, self.resource_group)
        self.groups = ProximityGroups(
            cluster, self.region, self.resource_group, self.compute, self.call
        )
        self.skus: dict[str, SkuFacts] = {}  # by lower-cased size name, from read_catalog
        self._power_refused = False  # the subscription's VM listing answered AUTH once

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
        found: dict[str, InstanceType] = {}
        for sku in skus:
            itype = instance_type_of(sku, self.region)
            if itype is None:
                continue
            facts = sku_facts(sku, self.region)
            self.skus[itype.name.lower()] = facts
            if facts.region_ok:  # restricted for this subscription here: never offered
                found[itype.name] = itype
        return sorted(found.values(), key=lambda t: t.name)

    # ------------------------------------------------------------------ list

    def list_instances(self) -> dict[str, CloudInstance]:
        self.nics.retry()
        compute, network = self.compute(), self.network()
        vms = self.call(
            f"listing VMs in resource group {self.resource_group}",
            lambda: list(compute.virtual_machines.list(self.resource_group)),
        )
        nics = self.call(
            f"listing network interfaces in resource group {self.resource_group}",
            lambda: list(network.network_interfaces.list(self.resource_group)),
        )
        self.nics.sweep(nics, {id_name(r.id).lower() for vm in vms for r in nic_refs(vm)})
        ours = [vm for vm in vms if (vm.tags or {}).get(TAG_CLUSTER) == self.cluster]
        if not ours:
            return {}
        statuses = self._power_states()
        addresses = {str(nic.id).lower(): private_ip(nic) for nic in nics}
        instances = (self._instance(vm, addresses, statuses) for vm in ours)
        return {inst.instance_id: inst for inst in instances}

    def _power_states(self) -> dict[str, list[str]]:
        if self._power_refused:
            return {}
        return self._read_power_states()

    def _read_power_states(self) -> dict[str, list[str]]:
        """VM id (lower-cased) -> its instance-view status codes (PowerState/...), from the
        one listing that returns them for many VMs: the subscription's, statusOnly=true."""
        compute = self.compute()
        try:
            vms = self.call(
                "listing VM power states",
                lambda: list(compute.virtual_machines.list_all(status_only="true")),
            )
        except ProviderError as exc:
            if exc.kind is not ErrorKind.AUTH:
                raise
            # a role scoped to the resource group may not list the subscription's VMs:
            # states come from provisioningState alone (Succeeded: running)
            self._power_refused = True
            log.warning(
                "%s: no power states (%s); reading provisioning states only", self.name, exc
            )
            return {}
        states: dict[str, list[str]] = {}
        for vm in vms:
            view = getattr(vm, "instance_view", None)
            codes = [str(s.code) for s in (getattr(view, "statuses", None) or []) if s.code]
            states[str(vm.id).lower()] = codes
        return states

    def _instance(
        self, vm: Any, addresses: dict[str, str | None], power: dict[str, list[str]] | None = None
    ) -> CloudInstance:
        tags = dict(vm.tags or {})
        address = next((addresses.get(str(r.id).lower()) for r in nic_refs(vm)), None)
        statuses = (power or {}).get(str(vm.id).lower(), [])
        created = getattr(vm, "time_created", None)
        return CloudInstance(
            instance_id=str(vm.name),
            node_name=tags.get(TAG_NODE),
            state=instance_state(vm.provisioning_state, statuses),
            private_address=address,
            instance_type=enum_text(vm.hardware_profile.vm_size) if vm.hardware_profile else "",
            zone=(list(vm.zones or []) or [None])[0],
            lifecycle="spot" if enum_text(vm.priority).lower() == "spot" else "on-demand",
            launch_time=created if isinstance(created, datetime) else parse_time(created),
            tags=tags,
        )

    # ------------------------------------------------------------------ launch

    def prepare(self, spec: LaunchSpec, count: int, request_id: str) -> VmPlan | None:
        key = self._validate(spec, count)
        spec = resolved(spec, self.subscription_id, self.resource_group)
        nodes, refused = self._within_group(spec, spec.node_names[:count], request_id)
        group = self.groups.ensure(spec, len(nodes), request_id)  # the last step before VMs
        spec = spec if group is None else replace(spec, placement_group=group)
        return VmPlan(spec, request_id, nodes, key, refused) if nodes or refused else None

    def start(self, plan: VmPlan, result: LaunchResult) -> None:
        self.nics.retry()
        if plan.held_back is not None:
            result.errors.append(plan.held_back)
        if not plan.nodes:
            return
        if plan.spec.all_or_nothing:
            self._launch_whole(plan, result)
            return
        spec, request_id, key = plan.spec, plan.request_id, plan.ssh_public_key
        outcomes = self._parallel(lambda n: self._launch_node(spec, n, request_id, key), plan.nodes)
        for outcome in outcomes:
            if outcome.instance is not None:
                result.instances.append(outcome.instance)
            result.errors.extend(outcome.errors)

    def placement_groups(self) -> list[PlacementGroup]:
        return self.groups.listed()

    def delete_placement_group(self, group: PlacementGroup) -> bool:
        return self.groups.delete(group)

    # ------------------------------------------------------------------ reservations

    def _group_members(self, ref: str) -> list[ReservationFacts]:
        """Each member reservation of a group, with what it holds (its instance view)."""
        full = group_id(self.subscription_id, self.resource_group, ref)
        group, name = group_parts(full)
        ops = self.compute().capacity_reservations

        def read() -> list[ReservationFacts]:
            members = ops.list_by_capacity_reservation_group(group, name)
            return [
                to_facts(ref, ops.get(group, name, str(m.name), expand="instanceView"))
                for m in members
            ]

        return self.call(f"reading capacity reservation group {name}", read)

    def reservations(self, targets: Sequence[ReservationTarget]) -> list[ReservationFacts]:
        """Each capacity reservation group the targets name, as one row."""
        refs = sorted({t.ref for t in targets if t.kind == "group"})
        return [whole_group(ref, self._group_members(ref)) for ref in refs]

    def _within_group(
        self, spec: LaunchSpec, nodes: tuple[str, ...], request_id: str
    ) -> tuple[tuple[str, ...], LaunchError | None]:
        """The nodes to launch in the spec's group, and what a full group holds back."""
        target = spec.reservation
        if target is None or target.kind != "group" or not nodes:
            return nodes, None
        free, total = free_for(self._group_members(target.ref), spec.instance_types)
        if len(nodes) <= free:
            return nodes, None
        if target.fallback:
            log.warning(beyond_line(target, free, len(nodes), request_id))
            return nodes, None
        if spec.all_or_nothing:  # a job's nodes start together: none of them
            return (), held_back(target, free, total, len(nodes), whole=True)
        return nodes[:free], held_back(target, free, total, len(nodes) - free)

    def _launch_whole(self, plan: VmPlan, result: LaunchResult) -> None:
        """All or nothing: each size x zone in order gets a batch of every node's VM (in
        parallel); a batch that comes back short is deleted at once and the next size or
        zone gets the whole batch. What cannot be deleted stays in the result (the engine
        terminates it as failed)."""
        spec, count = plan.spec, len(plan.nodes)
        for itype in spec.instance_types:
            skipped = NodeOutcome()
            for zone in self._zones_for(spec, itype, skipped):
                batch = functools.partial(self._launch_node_on, plan, itype=itype, zone=zone)
                outcomes = self._parallel(batch, plan.nodes)
                got = [o.instance for o in outcomes if o.instance is not None]
                result.errors.extend(e for o in outcomes for e in o.errors)
                if len(got) == count:
                    result.instances.extend(got)
                    return
                if got:
                    left = self.release([i.instance_id for i in got], plan.request_id)
                    result.errors.append(short_whole(len(got), count, itype, zone, not left))
                    if left:
                        result.instances.extend(i for i in got if i.instance_id in left)
                        return
                failures = [e for o in outcomes for e in o.errors]
                if any(family_quota(e.kind, e.message) for e in failures):  # that family: next size
                    break
                if any(e.kind is not ErrorKind.CAPACITY for e in failures):
                    return
            result.errors.extend(replace(e, count=count) for e in skipped.errors)

    def _launch_node_on(self, plan: VmPlan, node: str, itype: str, zone: str | None) -> NodeOutcome:
        """One node's VM of one size in one zone (reused when this request made it before)."""
        names = names_for(self.cluster, node, plan.request_id)
        try:
            existing = self._get_vm(names.vm)
            reused = self._reuse(existing, plan.request_id, names) if existing else None
            if reused is not None:
                return reused
            tags = instance_tags(self.cluster, plan.spec, plan.request_id, node)
            req = VmRequest(self.region, names, "", itype, zone, tags, plan.ssh_public_key)
            instance, failure = self._attempt(plan.spec, req)
            if failure is not None and failure.code == NIC_RESERVED:
                instance, failure = self._attempt(plan.spec, req)  # once more, another NIC
        except ProviderError as exc:
            if exc.kind is ErrorKind.AUTH:
                raise
            return NodeOutcome(errors=[LaunchError(exc.kind, exc.code, str(exc), count=1)])
        if failure is not None:
            self._delete_leftovers(names)
            return NodeOutcome(errors=[failure.launch_error(itype, zone, count=1)])
        return NodeOutcome(instance=instance)

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
            facts = self.skus.get(itype.lower())
            if spec.fabric == "infiniband" and not (facts and facts.rdma):
                why = "not an InfiniBand size (resource SKU capability RdmaEnabled)"
                raise bad("instance_types", itype, why)
        subnet = subnet_parts(spec.subnets[0])
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
        return throwaway_ssh_key()

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
            zones = self._zones_for(spec, itype, outcome)
            for zone in zones:
                req = VmRequest(self.region, names, "", itype, zone, tags, key)
                instance, failure = self._attempt(spec, req)
                if failure is not None and failure.code == NIC_RESERVED:
                    instance, failure = self._attempt(spec, req)  # once more, another NIC
                if instance is not None:
                    outcome.instance = instance
                    return outcome
                if failure is not None:
                    outcome.errors.append(failure.launch_error(itype, zone, count=1))
                    if family_quota(failure.kind, failure.message):  # that family: the next size
                        break
                    if failure.kind is not ErrorKind.CAPACITY:
                        return self._give_up(names, outcome)
        return self._give_up(names, outcome)

    def _zones_for(self, spec: LaunchSpec, itype: str, outcome: NodeOutcome) -> list[str | None]:
        """The zones of the spec this size may be tried in: none when the subscription may
        not use it here (or not as spot), which is CAPACITY like the PUT's SkuNotAvailable
        (the next size, then the fallback template), without the PUT and its NIC."""
        wanted: list[str | None] = list(spec.zones) or [None]
        facts = self.skus.get(itype.lower())
        if facts is None:
            return wanted
        zones = facts.usable_zones(wanted)
        why = "" if zones else f"restricted in {self.region} zones {', '.join(map(str, wanted))}"
        if spec.market == "spot" and not facts.spot:
            zones, why = [], "not LowPriorityCapable (no spot VMs of this size)"
        if not zones:
            message = f"VM size {itype} is not available to this subscription: {why}"
            error = LaunchError(ErrorKind.CAPACITY, "SkuNotAvailable", message, itype, None, 1)
            outcome.errors.append(error)
        return zones

    def _attempt(
        self, spec: LaunchSpec, req: VmRequest
    ) -> tuple[CloudInstance | None, Failure | None]:
        """One VM creation of one size (in one zone), with a NIC of its own: the NIC of a
        failed VM stays reserved for it for 180 s, so it is retired (nics.py), not reused."""
        nic_name = fresh_nic_name(req.names.vm)
        try:
            nic = self._ensure_nic(spec, nic_name, nic_tags(req.tags))
        except SDK_ERRORS as exc:
            self.nics.retire([nic_name])
            return None, self.failure(exc)
        try:
            vm = self._create_vm(spec, replace(req, nic_id=str(nic.id)))
        except SDK_ERRORS as exc:
            failure = self.failure(exc)
            self._discard_failed_vm(req.names.vm)
            self.nics.retire([nic_name])
            return None, failure
        return self._instance(vm, {str(nic.id).lower(): private_ip(nic)}), None

    def _reuse(self, vm: Any, request_id: str, names: Names) -> NodeOutcome | None:
        """A VM of this name exists already: reuse it (same request), or report why not."""
        state = enum_text(vm.provisioning_state).lower()
        if (vm.tags or {}).get(TAG_REQUEST) != request_id:
            message = f"VM {names.vm} exists for request {(vm.tags or {}).get(TAG_REQUEST)}"
            return NodeOutcome(errors=[LaunchError(ErrorKind.OTHER, "NameInUse", message)])
        if state == "failed":  # an earlier try's: gone, with its NIC once Azure lets it go
            self._discard_failed_vm(names.vm)
            self.nics.retire([id_name(r.id) for r in nic_refs(vm)])
            return None
        if state == "deleting":
            message = f"VM {names.vm} is being deleted"
            return NodeOutcome(errors=[LaunchError(ErrorKind.TRANSIENT, "Deleting", message)])
        network = self.network()
        group = self.resource_group
        nics = [
            self.call("reading NIC", functools.partial(network.network_interfaces.get, group, name))
            for name in [id_name(r.id) for r in nic_refs(vm)][:1]
        ]
        addresses = {str(nic.id).lower(): private_ip(nic) for nic in nics}
        return NodeOutcome(instance=self._instance(vm, addresses))

    def _get_vm(self, name: str) -> Any | None:
        compute = self.compute()
        try:
            return compute.virtual_machines.get(self.resource_group, name)
        except SDK_ERRORS as exc:
            if is_not_found(exc):
                return None
            raise self.error(exc, f"reading VM {name}") from None

    def _ensure_nic(self, spec: LaunchSpec, name: str, tags: dict[str, str]) -> Any:
        nsg = spec.security_groups[0] if spec.security_groups else None
        body: Any = nic_body(self.region, spec.subnets[0], tags, nsg)  # ARM JSON, any SDK
        body = with_accelerated_networking(body, spec)
        poller = self.network().network_interfaces.begin_create_or_update(
            self.resource_group, name, body
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
        self.nics.retry()
        failures = [f for f in self._parallel(self._terminate_one, ids) if f is not None]
        if failures:
            raise failures[0]

    def _terminate_one(self, vm_name: str) -> ProviderError | None:
        try:
            vm = self._get_vm(vm_name)
            nics = [id_name(r.id) for r in nic_refs(vm)] if vm is not None else []
            self.compute().virtual_machines.begin_delete(self.resource_group, vm_name).result()
        except ProviderError as exc:
            return exc
        except SDK_ERRORS as exc:
            if not is_not_found(exc):
                return self.error(exc, f"deleting VM {vm_name}")
            nics = []
        self.nics.retire(nics)  # gone with the VM (delete option Delete), else retired
        self._delete_leftovers(names_of(vm_name))
        return None

    def _delete_leftovers(self, names: Names) -> None:
        """The OS disk goes with the VM (delete option Delete); make sure of it."""
        try:
            self.compute().disks.begin_delete(self.resource_group, names.os_disk).result()
        except SDK_ERRORS as exc:
            if not is_not_found(exc):
                log.warning("could not delete %s: %s", names.os_disk, classify(exc).message)

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

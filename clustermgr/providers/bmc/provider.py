"""The shared half of the on-prem power providers: the seam over a BMC `Driver`.

An "instance" is a node: its id and node name are the node's name, its hardware class
(`bmc_nodes.instance_type`) is its instance type, the provider's region is its zone.

  * launch = power on. The spec's `node_names[:count]` are the nodes (each must be one of
    `bmc_nodes`, and of a hardware class the spec's `instance_types` name: INVALID
    otherwise, before any BMC is called). A node already on, or powering on, is returned
    as it is: power on is idempotent, so the same request id twice (or two requests for
    one node) never does anything twice. A BMC keeps no tags, so the request id and
    template are in the returned instances' tags only, not in `list_instances`: after a
    crash the engine's relaunch re-issues the power on, which is then a no-op. A BMC that
    does not answer is a CAPACITY error for its node (that node cannot be had now: the
    engine falls back to its next template, such as a cloud), one that rejects the
    credentials is an AUTH error for its node, raised when no node was powered on.
  * terminate = power off: a graceful shutdown first (IPMI soft-off, Redfish
    GracefulShutdown) when `soft_off_timeout_s` > 0 and the BMC offers one, then a hard
    off when the node is not off after that many seconds; it returns once every node is
    off (at most `hard_off_timeout_s` after the hard off) and raises TRANSIENT, naming the
    nodes, for any it could not power off. Unknown ids (not in bmc_nodes) are ignored.
  * list_instances = every managed node with its power state: on RUNNING, off TERMINATED,
    a BMC that does not answer within `bmc_timeout_s` (or answers what we cannot read)
    UNKNOWN, never off. AUTH is raised when the credentials were rejected and no node
    could be read; otherwise the rejected nodes are UNKNOWN with an error log line.

Calls go to different BMCs in parallel and one at a time to the same BMC (a Redfish BMC
may serve several nodes); once a BMC has not answered, its other nodes are not asked
again in the same call. No password is ever logged or put in an error (see client.py).
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from clustermgr.core import progress_marks
from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.core.secret import Secret
from clustermgr.providers.base import (
    TAG_CLUSTER,
    TAG_FAULT,
    TAG_NODE,
    CloudInstance,
    InstanceState,
    InstanceType,
    LaunchError,
    LaunchResult,
    LaunchSpec,
    ours,
)
from clustermgr.providers.bmc.client import Driver, credential_summary, read_password
from clustermgr.providers.bmc.errors import BMC_SDK, BmcError
from clustermgr.providers.bmc.kind import bmc_options
from clustermgr.providers.bmc.shapes import (
    INSTANCE_STATE,
    UNREACHABLE,
    BmcNode,
    Power,
    bmc_nodes,
    instance_of,
)
from clustermgr.providers.skeleton import (
    Check,
    CloudProvider,
    Failure,
    Sdk,
    Words,
    auth_error,
    parallel,
)

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

log = logging.getLogger(__name__)
# failures no retry fixes (credentials rejected; no such system, cipher suite, TLS): an
# admin must see them, so the listing tags the node with them (CloudInstance.fault)
ADMIN_FAULTS = frozenset({ErrorKind.AUTH, ErrorKind.INVALID})

MAX_BMC_THREADS = 32
MIN_POLL_S = 0.05


@dataclass(frozen=True)
class PowerPlan:
    spec: LaunchSpec
    request_id: str
    nodes: list[BmcNode]
    passwords: dict[str, Secret]


@dataclass
class Outcome:
    """What one call did to each node: a value, or the failure it met."""

    values: dict[str, object] = field(default_factory=dict)
    failures: dict[str, Failure] = field(default_factory=dict)


class PowerProvider(CloudProvider[PowerPlan]):
    """Launch = power on, terminate = power off, list = power states (module docstring)."""

    sdk: ClassVar[Sdk] = BMC_SDK
    words: ClassVar[Words] = Words(
        instance="node",
        instance_type="hardware class",
        credential_check="credentials",
        auth_message="BMC credentials rejected ({source}): {message}",
    )

    def __init__(self, settings: ProviderSettings, cluster: str) -> None:
        super().__init__(settings, cluster)
        self.options = bmc_options(settings)
        self.nodes = bmc_nodes(settings)
        self.driver = self.make_driver(settings)

    # ------------------------------------------------------------------ the protocol's part

    @abstractmethod
    def make_driver(self, settings: ProviderSettings) -> Driver: ...

    def protocol_checks(self) -> list[Check]:
        """Checks of the local tooling, run before the BMCs are asked."""
        return []

    # ------------------------------------------------------------------ credentials

    def credential_source(self) -> str:
        return credential_summary(self.nodes)

    def passwords(self, nodes: Sequence[BmcNode]) -> dict[str, Secret]:
        """Every node's password, read now (AUTH naming the source when one cannot be)."""
        return {node.name: read_password(node, self.name) for node in nodes}

    def node_auth_error(self, node: BmcNode, failure: Failure) -> ProviderError:
        source = node.credential_source()
        return auth_error(self.name, source, failure.message, failure.code, self.words.auth_message)

    # ------------------------------------------------------------------ calls to BMCs

    def each_node(
        self,
        nodes: Sequence[BmcNode],
        passwords: dict[str, Secret],
        call: Callable[[BmcNode, Secret], object],
    ) -> Outcome:
        """`call` for every node: BMCs in parallel, the nodes of one BMC in turn; a BMC
        that did not answer is not asked about its other nodes."""
        groups: dict[str, list[BmcNode]] = {}
        for node in nodes:
            groups.setdefault(node.endpoint, []).append(node)

        def one_bmc(group: list[BmcNode]) -> Outcome:
            done = Outcome()
            silent: Failure | None = None
            for node in group:
                if silent is not None:
                    done.failures[node.name] = Failure(
                        silent.kind, silent.code, f"{node.describe()}: {silent.message}"
                    )
                    continue
                try:
                    done.values[node.name] = call(node, passwords[node.name])
                except BmcError as exc:
                    done.failures[node.name] = exc.failure
                    if exc.failure.code == UNREACHABLE:
                        silent = Failure(exc.kind, UNREACHABLE, "its BMC did not answer")
            return done

        merged = Outcome()
        workers = min(MAX_BMC_THREADS, len(groups))
        for done in parallel(one_bmc, list(groups.values()), workers, f"bmc-{self.name}"):
            merged.values.update(done.values)
            merged.failures.update(done.failures)
        return merged

    def wait_for(self, node: BmcNode, password: Secret, wanted: Power, timeout_s: float) -> bool:
        """Poll the node's power state until it is `wanted` or `timeout_s` has passed."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.driver.status(node, password) is wanted:
                return True
            progress_marks.beat()  # a soft-off that takes minutes is polled, not stalled
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(max(self.options.polling_interval_s, MIN_POLL_S), left))

    # ------------------------------------------------------------------ launch

    def prepare(self, spec: LaunchSpec, count: int, request_id: str) -> PowerPlan | None:
        if spec.market != "on-demand":
            raise self.bad(spec, "market", spec.market, "on-prem nodes have no spot market")
        if spec.root_volume_gb is not None:
            why = "an on-prem node boots its own disks (remove it)"
            raise self.bad(spec, "volume_size_gb", str(spec.root_volume_gb), why)
        self.need_names(spec, count)
        labels = {node.instance_type for node in self.nodes.values()}
        for name in spec.instance_types:
            if name not in labels:
                known = ", ".join(sorted(labels))
                raise self.bad(spec, "instance_types", name, f"unknown (known: {known})")
        nodes: list[BmcNode] = []
        for name in spec.node_names[:count]:
            node = self.nodes.get(name)
            if node is None:
                why = f"node {name!r} has no BMC in provider {self.name} (bmc_nodes)"
                raise self.bad(spec, "node_names", name, why)
            if node.instance_type not in spec.instance_types:
                types = ",".join(spec.instance_types)
                why = f"node {name} is of hardware class {node.instance_type!r}"
                raise self.bad(spec, "instance_types", types, why)
            nodes.append(node)
        if not nodes:
            return None
        return PowerPlan(spec, request_id, nodes, self.passwords(nodes))

    def start(self, plan: PowerPlan, result: LaunchResult) -> None:
        def power_on(node: BmcNode, password: Secret) -> InstanceState:
            state = self.driver.status(node, password)
            if state is Power.ON:
                log.info("%s: %s is already on", self.name, node.name)
                return InstanceState.RUNNING
            if state is Power.POWERING_ON:
                return InstanceState.PENDING
            self.driver.power_on(node, password)
            log.info("%s: powered on %s (request %s)", self.name, node.name, plan.request_id)
            return InstanceState.PENDING

        done = self.each_node(plan.nodes, plan.passwords, power_on)
        auth: ProviderError | None = None
        for node in plan.nodes:
            state = done.values.get(node.name)
            if isinstance(state, InstanceState):
                result.instances.append(self.launched(node, state, plan))
                continue
            failure = done.failures[node.name]
            if failure.kind is ErrorKind.AUTH:
                auth = auth or self.node_auth_error(node, failure)
            result.errors.append(self.launch_error(node, failure))
        if auth is not None and not result.instances:
            raise auth

    def launch_error(self, node: BmcNode, failure: Failure) -> LaunchError:
        kind = ErrorKind.CAPACITY if failure.code == UNREACHABLE else failure.kind
        message = failure.message
        if failure.kind is ErrorKind.AUTH:
            message = f"{failure.message} ({node.credential_source()})"
        return LaunchError(kind, failure.code, message, node.instance_type, self.region, 1)

    def launched(self, node: BmcNode, state: InstanceState, plan: PowerPlan) -> CloudInstance:
        tags = ours(self.cluster, plan.spec.template, plan.request_id, plan.spec.tags)
        return self.instance(node, state, {**tags, TAG_NODE: node.name})

    def instance(self, node: BmcNode, state: InstanceState, tags: dict[str, str]) -> CloudInstance:
        return instance_of(node, state, self.region, tags)

    # ------------------------------------------------------------------ list

    def list_instances(self) -> dict[str, CloudInstance]:
        nodes = list(self.nodes.values())
        done = self.each_node(nodes, self.passwords(nodes), self.driver.status)
        rejected = [n for n in nodes if n.name in done.failures and self._auth(done, n)]
        if rejected and not done.values:
            raise self.node_auth_error(rejected[0], done.failures[rejected[0].name])
        listed: dict[str, CloudInstance] = {}
        for node in nodes:
            power = done.values.get(node.name, Power.UNKNOWN)
            if node.name in done.failures:
                self._log_unknown(node, done.failures[node.name])
            assert isinstance(power, Power)
            tags = {TAG_CLUSTER: self.cluster, TAG_NODE: node.name}
            failure = done.failures.get(node.name)
            if failure is not None and failure.kind in ADMIN_FAULTS:
                tags[TAG_FAULT] = self.launch_error(node, failure).reason()
            listed[node.name] = self.instance(node, INSTANCE_STATE[power], tags)
        return listed

    @staticmethod
    def _auth(done: Outcome, node: BmcNode) -> bool:
        return done.failures[node.name].kind is ErrorKind.AUTH

    def _log_unknown(self, node: BmcNode, failure: Failure) -> None:
        if failure.kind is ErrorKind.AUTH:
            log.error(
                "%s: %s: power state unknown: %s",
                self.name,
                node.name,
                self.node_auth_error(node, failure).args[0],
            )
        else:
            log.warning(
                "%s: power state of %s unknown: %s [%s]",
                self.name,
                node.name,
                failure.message,
                failure.code,
            )

    # ------------------------------------------------------------------ terminate

    def remove(self, instance_ids: list[str], request_id: str) -> None:
        unknown = [i for i in instance_ids if i not in self.nodes]
        if unknown:
            log.warning("%s: not in bmc_nodes, ignored: %s", self.name, ", ".join(unknown))
        nodes = [self.nodes[i] for i in instance_ids if i in self.nodes]
        if not nodes:
            return
        done = self.each_node(nodes, self.passwords(nodes), self.power_off)
        if not done.failures:
            return
        failed = [n for n in nodes if n.name in done.failures]
        first = done.failures[failed[0].name]
        if all(done.failures[n.name].kind is ErrorKind.AUTH for n in failed):
            raise self.node_auth_error(failed[0], first)
        details = "; ".join(done.failures[n.name].message for n in failed[:5])
        more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
        raise ProviderError(
            ErrorKind.TRANSIENT,
            f"could not power off {len(failed)} of {len(nodes)} nodes: {details}{more}",
            provider=self.name,
            code=first.code,
        )

    def power_off(self, node: BmcNode, password: Secret) -> None:
        """Graceful shutdown, then hard off; returns once the BMC reports the node off."""
        if self.driver.status(node, password) is Power.OFF:
            return
        soft_s = self.options.soft_off_timeout_s
        if soft_s > 0 and self.driver.soft_off(node, password):
            log.info("%s: graceful shutdown of %s (up to %g s)", self.name, node.name, soft_s)
            if self.wait_for(node, password, Power.OFF, soft_s):
                log.info("%s: %s is off (graceful shutdown)", self.name, node.name)
                return
            log.warning(
                "%s: %s still on %g s after a graceful shutdown: hard power off",
                self.name,
                node.name,
                soft_s,
            )
        self.driver.hard_off(node, password)
        hard_s = self.options.hard_off_timeout_s
        if not self.wait_for(node, password, Power.OFF, hard_s):
            raise BmcError(
                Failure(
                    ErrorKind.TRANSIENT,
                    "PowerOffTimeout",
                    f"{node.describe()}: still not off {hard_s:g} s after a hard power off",
                )
            )
        log.info("%s: %s is off (hard power off)", self.name, node.name)

    # ------------------------------------------------------------------ catalog, checks

    def read_catalog(self) -> list[InstanceType]:
        """One type per hardware class; its shape is the template's (a BMC does not say)."""
        labels = sorted({node.instance_type for node in self.nodes.values()})
        return [InstanceType(label, vcpus=0, memory_mb=0) for label in labels]

    def check_credentials(self) -> str:
        self.passwords(list(self.nodes.values()))
        return f"passwords of {len(self.nodes)} nodes readable ({self.credential_source()})"

    def checks(self) -> list[Check]:
        return [*self.protocol_checks(), ("BMCs", self.check_bmcs)]

    def check_bmcs(self) -> str:
        nodes = list(self.nodes.values())
        done = self.each_node(nodes, self.passwords(nodes), self.driver.status)
        failed = [n for n in nodes if n.name in done.failures]
        for node in failed:
            if self._auth(done, node):
                raise self.node_auth_error(node, done.failures[node.name])
        if failed:
            first = done.failures[failed[0].name]
            raise ProviderError(
                first.kind,
                f"{len(failed)} of {len(nodes)} BMCs failed: {first.message}",
                provider=self.name,
                code=first.code,
            )
        states = [str(v) for v in done.values.values()]
        counts = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states)))
        return f"{len(nodes)} BMCs answer ({counts})"

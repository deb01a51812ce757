"""ClusterView: everything a policy may look at, as pure data (no I/O, no sessions)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from clustermgr.core.kinds import onprem_types
from clustermgr.core.pricing import BillingRule, Price, price_of
from clustermgr.nodes.states import ACTIVE_CLOUD_STATES, NodeState
from clustermgr.policy.decision import ScaleDecision
from clustermgr.workload.base import PendingJob, RunningJob, WorkloadNode
from clustermgr.workload.history import RunHistory


@dataclass(frozen=True)
class TemplateView:
    name: str
    provider: str
    provider_type: str
    region: str
    partition: str
    instance_types: tuple[str, ...]
    cpus: int
    memory_mb: int
    gpus: int
    gpu_model: str | None
    features: frozenset[str]
    max_nodes: int
    market: str
    demand_mode: str
    boot_timeout_s: float
    prices: Mapping[str, Price] = field(default_factory=dict)
    billing: BillingRule = field(default_factory=BillingRule)
    # (Code:PROTECTED) reason, or (Code:BACKOFF) while its cloud is busy: the engine
    # launches none now
    protected: str | None = None
    # (Code:DIRECTOR) reason: its region's director is not READY yet, or (Code:IMAGE): its
    # region has no usable machine image of its image definition yet, so the engine launches
    # none now (the nodes stay held, the jobs pending); a policy may ask another region
    waiting: str | None = None
    # on-prem templates (ipmi, redfish providers): nodes that always stay on, and an idle
    # node's draw in kW (what a powered-off node saves)
    min_on: int = 0
    idle_kw: float = 0.0
    # where a launch goes when the cloud has no capacity for any of its types and zones
    fallbacks: tuple[str, ...] = ()
    # a job's nodes are launched together or not at all (`scaling_strategy`)
    all_or_nothing: bool = False

    @property
    def onprem(self) -> bool:
        """Its nodes are on-prem machines whose power a BMC controls."""
        return self.provider_type in onprem_types()

    @property
    def blocked(self) -> str | None:
        """Why the engine launches none of this template now, if it does not."""
        return self.protected or self.waiting

    def hourly_price(self, market: str | None = None, instance_type: str | None = None) -> float:
        """$/hour of one node (first instance type unless named); 0 when no price is set."""
        return price_of(self.prices, self.instance_types, instance_type, market or self.market)


@dataclass(frozen=True)
class NodeView:
    name: str
    kind: str
    state: NodeState
    template: str | None
    slurm: WorkloadNode | None
    instance_id: str | None = None
    instance_type: str | None = None
    market: str | None = None
    request_id: str | None = None
    launched_at: datetime | None = None
    state_since: datetime | None = None
    idle_since: datetime | None = None
    jobs_end: datetime | None = None  # latest time-limit end of the jobs running on it
    settling: bool = False  # being stopped or failed this cycle: not a free slot yet
    # on-prem nodes: its BMC did not answer this cycle (power state unknown, never "off"):
    # not capacity, neither an idle node nor a free slot
    power_unknown: bool = False

    @property
    def is_burst(self) -> bool:
        return self.kind == "cloud"

    @property
    def idle(self) -> bool:
        return (
            self.state is NodeState.UP
            and self.slurm is not None
            and self.slurm.idle
            and not self.power_unknown
        )


@dataclass(frozen=True)
class LaunchFailure:
    template: str
    kind: str  # the reason's KIND: an ErrorKind value, BOOT_TIMEOUT, VANISHED, ...
    market: str
    at: datetime


COMING_STATES = (NodeState.REQUESTED, NodeState.LAUNCHING, NodeState.BOOTING)

BurstIndex = Mapping[tuple[NodeState, str | None], Mapping[str, NodeView]]


def burst_index(
    nodes: Iterable[NodeView],
) -> dict[tuple[NodeState, str | None], dict[str, NodeView]]:
    index: dict[tuple[NodeState, str | None], dict[str, NodeView]] = {}
    for node in nodes:
        if node.kind == "cloud":
            index.setdefault((node.state, node.template), {})[node.name] = node
    return index


def is_free_slot(node: NodeView, down_is_out: bool) -> bool:
    """A cloud node `ClusterView.free_slots` lists (`down_is_out`: its template is on-prem)."""
    return (
        node.state is NodeState.POWERED_DOWN
        and node.slurm is not None
        and not node.settling
        and not node.power_unknown
        and "POWERING_DOWN" not in node.slurm.flags
        and not (down_is_out and node.slurm.state == "DOWN")
    )


@dataclass(frozen=True)
class ClusterView:
    now: datetime
    templates: Mapping[str, TemplateView]
    nodes: Mapping[str, NodeView]
    pending: Sequence[PendingJob] = ()
    running: Sequence[RunningJob] = ()
    resume_requests: Mapping[str, Sequence[str]] = field(default_factory=dict)  # node -> jobs
    failures: Sequence[LaunchFailure] = ()
    month_spend: float = 0.0  # $ spent this calendar month on finished nodes
    proposed: ScaleDecision = field(default_factory=ScaleDecision)
    # run times of the jobs finished so far (workload.history): when the running jobs will
    # end by the site's own history rather than their time limits (onprem_first reads it);
    # policies only read it
    run_history: RunHistory = field(default_factory=RunHistory, repr=False, compare=False)
    # cloud nodes by (state, template): built from `nodes` when first asked, unless the
    # caller keeps one up to date itself (the simulator, which changes a few nodes per cycle)
    burst_index: BurstIndex | None = field(default=None, repr=False, compare=False)
    # `free_slots` per template, in name order, when the caller keeps them up to date itself
    # (the simulator: hundreds of powered-down slots in a capped pool, a few change a cycle)
    free_index: Mapping[str, Sequence[str]] | None = field(default=None, repr=False, compare=False)

    def burst_nodes(
        self, state: NodeState | None = None, template: str | None = None
    ) -> list[NodeView]:
        """Cloud nodes, by state and template (each policy asks several times per cycle)."""
        index = self._index()
        if state is not None and template is not None:
            return list(index.get((state, template), {}).values())
        return [
            node
            for (node_state, node_template), nodes in index.items()
            if (state is None or node_state is state)
            and (template is None or node_template == template)
            for node in nodes.values()
        ]

    def active_nodes(self, template: str | None = None) -> list[NodeView]:
        """Cloud nodes holding (or about to hold) a billed instance (in `burst_nodes`' order;
        the powered-down ones are skipped a state at a time, not node by node)."""
        return [
            node
            for (node_state, node_template), nodes in self._index().items()
            if node_state in ACTIVE_CLOUD_STATES and (template is None or node_template == template)
            for node in nodes.values()
        ]

    def powered_on(self, template: str) -> int:
        """On-prem nodes of a template that are on or coming on: active, not being stopped,
        and their BMC answered (what `min_on` counts)."""
        return sum(
            1
            for n in self.active_nodes(template)
            if n.state is not NodeState.STOPPING and not n.settling and not n.power_unknown
        )

    def coming_unclaimed(self, template: str, whole: bool = False) -> int:
        """Nodes of a template coming up (requested, launching, booting) that Slurm has not
        given a whole job (ALLOCATED): what the jobs pending now may still get. A node a
        job fills will not run them, and counting it would make them wait for it, then
        for a boot of their own. `whole`: for a job that needs its nodes to itself
        together (all-or-nothing), a node Slurm gave any job (MIXED too) is taken."""
        taken = ("ALLOCATED", "MIXED") if whole else ("ALLOCATED",)
        return sum(
            1
            for state in COMING_STATES
            for node in self.burst_nodes(state, template)
            if node.slurm is None or node.slurm.state not in taken
        )

    def free_slots(self, template: str) -> list[str]:
        """Powered-down slot names of a template, in name order (the order launches use).
        A slot Slurm is still powering down is not free: powering it up now would fail.
        Nor is an on-prem node Slurm has DOWN (a BMC fault an admin must see)."""
        if self.free_index is not None:
            return list(self.free_index.get(template, ()))
        view = self.templates.get(template)
        down_is_out = view is not None and view.onprem
        return sorted(
            n.name
            for n in self.burst_nodes(NodeState.POWERED_DOWN, template)
            if is_free_slot(n, down_is_out)
        )

    def hourly_rate(self) -> float:
        """$/hour of every active cloud node now."""
        total = 0.0
        for node in self.active_nodes():
            template = self.templates.get(node.template or "")
            if template:
                total += template.hourly_price(node.market, node.instance_type)
        return total

    def launch_price(self, template: str, market: str | None = None) -> float:
        """$/hour a launch of `template` may cost a node: the dearest of what a capacity
        shortage may turn it into (any of its instance types, then its fallback templates
        and theirs, unless they launch nothing now). What budget policies should judge."""
        names, todo = [template], [template]
        while todo:
            for fallback in self.templates[todo.pop()].fallbacks:
                if fallback in self.templates and fallback not in names:
                    names.append(fallback)
                    todo.append(fallback)
        prices = [
            t.hourly_price(market or self.templates[template].market, instance_type)
            for t in (self.templates[n] for n in names)
            if t.name == template or not t.blocked
            for instance_type in t.instance_types
        ]
        return max(prices, default=0.0)

    def pending_age(self, job: PendingJob) -> timedelta:
        return self.now - job.submit_time if job.submit_time else timedelta(0)

    def _index(self) -> BurstIndex:
        if self.burst_index is None:
            object.__setattr__(self, "burst_index", burst_index(self.nodes.values()))
        assert self.burst_index is not None
        return self.burst_index

    def with_proposed(self, decision: ScaleDecision) -> ClusterView:
        self._index()  # build it once, here, so every policy's copy shares it
        # a shallow copy with one field set: what dataclasses.replace makes, without its
        # per-field walk (three copies a cycle, hundreds of thousands in a replay)
        view = copy.copy(self)
        object.__setattr__(view, "proposed", decision)
        return view

"""Reconcile: judge every node from the one snapshot. Pure: no writes, no calls.

Per cloud node a verdict from the table in verdicts.py, then Slurm's hook requests
(resume, suspend, resume-fail) on top, then the instances no node holds: orphans when the
database proves cm-scale launched them, foreign otherwise (ownership.py). The act phase
carries the judgment out; a dry run prints it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from clustermgr.config import Settings, TemplateSettings
from clustermgr.core.node_report import NodeReport
from clustermgr.core.reasons import BOOT_TIMEOUT, POWER, RESUME_TIMEOUT, VANISHED, Reason
from clustermgr.imaging.node_revisions import checked_report, stale_reason
from clustermgr.nodes.states import NodeState
from clustermgr.providers.base import TAG_NODE, CloudInstance, InstanceState
from clustermgr.providers.launch_groups import PlacementGroup
from clustermgr.scaling.observe import NodeRecord, Snapshot
from clustermgr.scaling.onprem import BUSY_STATES, onprem_providers
from clustermgr.scaling.ownership import ForeignInstance, sweep
from clustermgr.scaling.spent_groups import spent_groups
from clustermgr.scaling.verdicts import (
    FAILING,
    FINISHING,
    CloudSeen,
    Judged,
    SlurmSeen,
    Verdict,
    cloud_seen,
    judge,
    slurm_seen,
)
from clustermgr.workload.base import WorkloadNode
from clustermgr.workload.hooks import HookRequest

NO_CONDITIONS: frozenset[str] = frozenset()
SUSPENDED_BY_SLURM = "Slurm powered it down (SuspendProgram)"


@dataclass(frozen=True)
class SlurmFacts:
    """What the node row should say about Slurm after this cycle."""

    slurm_state: str
    idle_since: datetime | None
    image_revision: str | None = None  # what the node reports (checked)
    kernel: str | None = None


@dataclass
class Judgment:
    # cloud node -> verdict; a KEEP of a node holding no instance is not stored
    verdicts: dict[str, Judged] = field(default_factory=dict)
    facts: dict[str, SlurmFacts] = field(default_factory=dict)  # only rows that change
    resume_requests: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node -> jobs
    relaunch: dict[str, list[str]] = field(default_factory=dict)  # request id -> nodes
    orphans: dict[str, list[str]] = field(default_factory=dict)  # provider -> instance ids
    # provider -> instances with the cluster's tags cm-scale never launched: left alone
    foreign: dict[str, list[ForeignInstance]] = field(default_factory=dict)
    strays: dict[str, list[str]] = field(default_factory=dict)  # on-prem provider -> nodes
    faults: dict[str, str] = field(default_factory=dict)  # on-prem node -> its BMC's fault
    requests: list[HookRequest] = field(default_factory=list)
    # provider -> per-launch placement groups no launch needs any more (scaling/spent_groups.py)
    spent_groups: dict[str, list[PlacementGroup]] = field(default_factory=dict)

    def having(self, *verdicts: Verdict) -> list[Judged]:
        return [j for j in self.verdicts.values() if j.verdict in verdicts]  # in name order

    def names(self, *verdicts: Verdict) -> list[str]:
        return [j.node for j in self.having(*verdicts)]

    @property
    def acting(self) -> list[Judged]:
        """Verdicts that change something (what a dry run lists)."""
        return [
            j for j in self.having(*Verdict) if j.verdict not in (Verdict.KEEP, Verdict.WAIT_BOOT)
        ]


def reconcile(settings: Settings, snapshot: Snapshot, orphan_grace_s: float) -> Judgment:
    judgment = Judgment(requests=list(snapshot.requests))
    slurm_nodes = snapshot.workload.nodes
    reports = node_reports(snapshot)
    for record in snapshot.nodes.values():
        if record.state is NodeState.RETIRED:
            continue
        seen = slurm_nodes.get(record.name)
        facts = slurm_facts(record, seen, snapshot.now, reports.get(record.name))
        if facts is not None:
            judgment.facts[record.name] = facts
    bound = {r.instance_id for r in snapshot.nodes.values() if r.instance_id}
    templates = {t.name: t for t in settings.templates}
    conditions = Conditions(templates, snapshot.now)
    onprem = onprem_providers(settings)
    for record in sorted(snapshot.nodes.values(), key=lambda r: r.name):
        if record.kind != "cloud":
            continue
        stale = stale_reason(snapshot.images.get(record.template or ""), reports.get(record.name))
        judged = judge_node(templates, conditions, snapshot, record, bound, onprem, stale)
        if record.provider in onprem:
            judged = _already_on(judged, record, snapshot)
        if judged.verdict is Verdict.KEEP and not record.instance_id:
            continue  # most of a large cluster, most cycles: nothing to carry
        judgment.verdicts[record.name] = judged
        if judged.verdict is Verdict.ADOPT and judged.instance is not None:
            bound.add(judged.instance.instance_id)
    _whole_requests(judgment, snapshot.nodes)
    _hook_verdicts(judgment, snapshot, {n for n, policy in conditions.modes.items() if policy})
    for judged in judgment.having(Verdict.RESUME):
        judgment.resume_requests.setdefault(judged.node, ())
    bound |= snapshot.director_instances  # a director's instance is the directors' business
    bound |= snapshot.unreadable_instances  # its row is unreadable, not gone
    accounted = frozenset(judgment.relaunch) | snapshot.director_requests
    found = sweep(
        snapshot.instances,
        snapshot.ownership,
        bound,
        accounted,
        snapshot.now,
        orphan_grace_s,
        onprem,
    )
    judgment.orphans, judgment.foreign = found.orphans, found.foreign
    judgment.spent_groups = spent_groups(
        settings.cluster.name,
        snapshot.placement_groups,
        snapshot.instances,
        snapshot.nodes,
        snapshot.group_requests,
        snapshot.now,
        orphan_grace_s,
    )
    judgment.strays = on_while_powered_down(snapshot, onprem)
    judgment.faults = bmc_faults(snapshot, onprem)
    return judgment


def judge_node(
    templates: Mapping[str, TemplateSettings],
    conditions: Conditions,
    snapshot: Snapshot,
    record: NodeRecord,
    bound: set[str],
    onprem: frozenset[str] = frozenset(),
    stale: str | None = None,
) -> Judged:
    """`stale`: the node's `(Code:IMAGE)` reason when it runs a stale image revision."""
    listing = snapshot.instances.get(record.provider or "")
    waiting = None
    if record.state is NodeState.LAUNCHING and listing is not None and record.request_id:
        waiting = waiting_instance(listing, record, bound)
    instance = listing.get(record.instance_id) if listing and record.instance_id else None
    address = (instance.private_address if instance else None) or record.private_address
    cloud = cloud_seen(record.instance_id, listing, waiting)
    seen = snapshot.workload.nodes.get(record.name)
    slurm = slurm_seen(seen, address if record.instance_id else None)
    template = templates.get(record.template or "")
    facts = conditions.of(record) | ({"stale_image"} if stale else set())
    rule = judge(record.state, cloud, slurm, frozenset(facts))
    reason = _reason(template, rule.verdict, record, seen, record.provider in onprem)
    return Judged(
        node=record.name,
        verdict=rule.verdict,
        state=record.state,
        cloud=cloud,
        slurm=slurm,
        reason=stale or "" if rule.verdict is Verdict.RETIRE else reason,
        instance=waiting or instance,
    )


def node_reports(snapshot: Snapshot) -> dict[str, NodeReport]:
    """What each bound cloud node reports it runs, checked against its template's image
    (junk skipped with a warning). Only nodes holding an instance: Slurm keeps a powered
    down node's Extra field, the report of the instance that was there."""
    reports = {}
    for record in snapshot.nodes.values():
        seen = snapshot.workload.nodes.get(record.name)
        if seen is None or seen.report is None or not record.instance_id:
            continue
        if record.state not in (NodeState.BOOTING, NodeState.UP, NodeState.DRAINING):
            continue
        found = snapshot.images.get(record.template or "")
        checked = checked_report(record.name, found, seen.report)
        if checked is not None:
            reports[record.name] = checked
    return reports


class Conditions:
    """The `when` facts of a node (policy_mode, expired), from per-template answers."""

    def __init__(self, templates: Mapping[str, TemplateSettings], now: datetime):
        self.deadlines = {
            name: now - timedelta(seconds=t.boot_timeout_s) for name, t in templates.items()
        }
        self.modes = {name: t.demand_mode == "policy" for name, t in templates.items()}

    def of(self, record: NodeRecord) -> frozenset[str]:
        deadline = self.deadlines.get(record.template or "")
        if deadline is None:
            return NO_CONDITIONS
        started = record.launched_at or record.state_since
        expired = started is not None and started < deadline
        return FACTS[(self.modes[record.template or ""], expired)]


FACTS = {
    (False, False): frozenset(),
    (True, False): frozenset({"policy_mode"}),
    (False, True): frozenset({"expired"}),
    (True, True): frozenset({"policy_mode", "expired"}),
}


def _reason(
    template: TemplateSettings | None,
    verdict: Verdict,
    record: NodeRecord,
    seen: WorkloadNode | None,
    onprem: bool = False,
) -> str:
    if onprem and verdict in (Verdict.VANISHED, Verdict.BOOT_TIMEOUT):
        return _power_reason(template, verdict)
    if verdict is Verdict.VANISHED:
        return str(
            Reason(
                VANISHED,
                f"instance {record.instance_id} is gone "
                "(spot reclaim or deleted outside clustermgr)",
            )
        )
    if verdict is Verdict.BOOT_TIMEOUT:
        timeout = template.boot_timeout_s if template else 0.0
        return str(Reason(BOOT_TIMEOUT, f"slurmd did not register within {timeout:.0f} s"))
    if verdict in (Verdict.UNHEALTHY, Verdict.DRAIN) or (
        verdict is Verdict.STOP and seen is not None and seen.reason
    ):
        return seen.reason if seen is not None else ""
    if verdict is Verdict.STOP:
        return SUSPENDED_BY_SLURM
    if verdict is Verdict.FINISH_FAIL:
        return record.state_reason
    return ""


def _already_on(judged: Judged, record: NodeRecord, snapshot: Snapshot) -> Judged:
    """An on-prem node recorded off that its BMC reports on and Slurm has registered (kept
    on by SuspendExcNodes, switched on by an admin, on before clustermgr managed it) is
    adopted: bound to itself, then UP once registered, so policies may power it off.
    Without this a policy-mode hold would power it down in Slurm while it stays on."""
    if record.state is not NodeState.POWERED_DOWN or record.instance_id:
        return judged
    instance = snapshot.instances.get(record.provider or "", {}).get(record.name)
    seen = snapshot.workload.nodes.get(record.name)
    if instance is None or instance.state is not InstanceState.RUNNING or seen is None:
        return judged
    if judged.slurm not in (SlurmSeen.REGISTERED, SlurmSeen.HELD) or not seen.responding:
        return judged
    if seen.powered_down or seen.powering_up:
        return judged
    return replace(judged, verdict=Verdict.ADOPT, instance=instance)


def on_while_powered_down(snapshot: Snapshot, onprem: frozenset[str]) -> dict[str, list[str]]:
    """On-prem nodes recorded off whose BMC reports them on while Slurm has them powered
    down, with no job and no power-up asked (a hard off that never came, a power button
    pressed by hand): Slurm places no job there, and if it powered one up, a node that was
    already on would never end POWERING_UP. Their chassis only draws power: switch it off."""
    found: dict[str, list[str]] = {}
    for record, instance, seen in _recorded_off(snapshot, onprem):
        if instance.state is InstanceState.RUNNING and "POWERING_DOWN" not in seen.flags:
            found.setdefault(record.provider or "", []).append(record.name)
    return found


def bmc_faults(snapshot: Snapshot, onprem: frozenset[str]) -> dict[str, str]:
    """On-prem nodes recorded off and powered down in Slurm whose BMC has a fault an admin
    must fix (credentials rejected, no such system: `CloudInstance.fault`), not DOWN in
    Slurm yet: they are set DOWN with it, so Slurm shows why they stay out. Nodes Slurm has
    up are left alone (they run jobs; only their power control is broken)."""
    return {
        record.name: instance.fault
        for record, instance, seen in _recorded_off(snapshot, onprem)
        if instance.fault is not None and seen.state != "DOWN"
    }


def _recorded_off(
    snapshot: Snapshot, onprem: frozenset[str]
) -> Iterator[tuple[NodeRecord, CloudInstance, WorkloadNode]]:
    """On-prem rows recorded off, listed by their BMC, that Slurm has powered down with no
    job on them and no power-up asked, in name order."""
    for record in sorted(snapshot.nodes.values(), key=lambda r: r.name):
        if record.provider not in onprem or record.state is not NodeState.POWERED_DOWN:
            continue
        instance = snapshot.instances.get(record.provider or "", {}).get(record.name)
        seen = snapshot.workload.nodes.get(record.name)
        if record.instance_id or instance is None or seen is None:
            continue
        if (
            seen.powered_down
            and not seen.power_up_asked
            and seen.state not in BUSY_STATES
            and not seen.completing
        ):
            yield record, instance, seen


def _power_reason(template: TemplateSettings | None, verdict: Verdict) -> str:
    """An on-prem node's failure: it is not gone, its power is the matter."""
    if verdict is Verdict.VANISHED:
        return str(Reason(VANISHED, "powered off outside clustermgr (its BMC reports it off)"))
    timeout = template.boot_timeout_s if template else 0.0
    return str(
        Reason(POWER, f"not back within {timeout:.0f} s of its power on (slurmd did not register)")
    )


def _whole_requests(judgment: Judgment, records: Mapping[str, NodeRecord]) -> None:
    """All or nothing per request: a request with any node not found in the cloud (killed
    while binding) is re-issued whole, so its idempotency token sees the same request."""
    groups: dict[str, list[Judged]] = {}
    for judged in judgment.having(Verdict.ADOPT, Verdict.RELAUNCH):
        request_id = records[judged.node].request_id
        if request_id:
            groups.setdefault(request_id, []).append(judged)
    for request_id, group in sorted(groups.items()):
        if all(j.verdict is Verdict.ADOPT for j in group):
            continue
        for judged in group:
            judgment.verdicts[judged.node] = Judged(
                judged.node, Verdict.RELAUNCH, judged.state, judged.cloud, judged.slurm
            )
        judgment.relaunch[request_id] = sorted(j.node for j in group)


def _hook_verdicts(judgment: Judgment, snapshot: Snapshot, policy_templates: set[str]) -> None:
    """Slurm's requests, over the table's verdict unless that one fails or finishes the node
    (a node the health check took out is failed with its own reason, not the suspend's).
    A policy-mode node's resume request is the echo of our own power-up (Slurm holds those
    nodes otherwise): it launches nothing, or a failed launch would be retried at once."""
    for request in snapshot.requests:
        for name in request.nodes:
            record = snapshot.nodes.get(name)
            if record is None or record.kind != "cloud":
                continue
            current = judgment.verdicts.get(name) or Judged(
                name, Verdict.KEEP, record.state, CloudSeen.NONE, SlurmSeen.MISSING
            )
            if current.verdict in FAILING | FINISHING:
                continue
            state = current.state
            jobs = tuple(j for j, ns in request.jobs.items() if name in ns)
            verdict, reason = None, ""
            if request.kind == "resume" and record.template in policy_templates:
                continue
            if request.kind == "resume" and state in (NodeState.POWERED_DOWN, NodeState.REQUESTED):
                verdict = Verdict.RESUME
                previous = judgment.resume_requests.get(name, ())
                judgment.resume_requests[name] = tuple(dict.fromkeys([*previous, *jobs]))
                asked = judgment.resume_requests[name]
                reason = "Slurm resume request" + (f" for jobs {','.join(asked)}" if asked else "")
            elif request.kind == "suspend" and state in (
                NodeState.UP,
                NodeState.DRAINING,
                NodeState.BOOTING,
            ):
                verdict, reason = Verdict.STOP, SUSPENDED_BY_SLURM
            elif request.kind == "resume-fail" and state not in (
                NodeState.POWERED_DOWN,
                NodeState.RETIRED,
            ):
                verdict = Verdict.RESUME_TIMEOUT
                reason = str(Reason(RESUME_TIMEOUT, "Slurm gave up waiting for the node"))
            if verdict is not None:
                judgment.verdicts[name] = Judged(
                    name, verdict, state, current.cloud, current.slurm, reason, current.instance
                )


def slurm_facts(
    record: NodeRecord,
    seen: WorkloadNode | None,
    now: datetime,
    report: NodeReport | None = None,
) -> SlurmFacts | None:
    """Slurm's state string, idle-since and the node's report (revision and kernel; the
    row's own until a new report comes) for the row, or None when nothing changes."""
    if seen is None:
        return None
    slurm_state = "+".join([seen.state, *sorted(seen.flags)])
    idle_since = (record.idle_since or now) if seen.idle else None
    revision, kernel = record.image_revision, record.kernel
    if report is not None:
        revision, kernel = report.revision or None, report.kernel or None
    if (slurm_state, idle_since, revision, kernel) == (
        record.slurm_state,
        record.idle_since,
        record.image_revision,
        record.kernel,
    ):
        return None
    return SlurmFacts(slurm_state, idle_since, revision, kernel)


def waiting_instance(
    listing: Mapping[str, CloudInstance], record: NodeRecord, bound: set[str]
) -> CloudInstance | None:
    for instance in listing.values():
        if (
            instance.instance_id not in bound
            and instance.request_id == record.request_id
            and instance.tags.get(TAG_NODE) == record.name
            and instance.state not in (InstanceState.TERMINATED, InstanceState.ERROR)
        ):
            return instance
    return None


__all__ = ["CloudSeen", "Judgment", "SlurmSeen", "reconcile"]

"""What a crash trial checks once the restarted cm-scale has run one reconcile cycle: the
cloud and the database agree, and every node's history is a legal path to its state.

- duplicate: a node name with more than one live instance tagged for it, or one instance
  held by two nodes;
- orphan: a live instance tagged with our cluster that no node holds (the campaign's
  config sets `orphan_grace_s = 0`, so the cycle that ran owed it nothing), or, for the
  local provider, a `cm-lc-*` namespace on its bridge that no running record names;
- lost: a node whose record is wrong: it forgot an instance that runs under its name,
  holds an instance the cloud does not have, holds one while POWERED_DOWN, is working
  (BOOTING, UP, DRAINING) but not known to Slurm at its instance's address, or has a
  history that breaks (an event's old state is not the previous event's new state, a
  transition lifecycle.py forbids, a last event whose new state is not the node's state).

- partial: an all-or-nothing request (launch_requests.all_or_nothing) with some but not all
  of its nodes' instances live: a job paying for nodes it can never start on.

"Live" is every listed state but TERMINATED: an instance still STOPPING is still billed.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import select

from clustermgr.db.database import Database
from clustermgr.db.models import LaunchRequest, Node, NodeEvent
from clustermgr.nodes.states import NodeState, can_transition
from clustermgr.providers.base import CloudInstance, InstanceState

KINDS = ("duplicate", "orphan", "lost", "partial")
WORKING = frozenset({NodeState.BOOTING.value, NodeState.UP.value, NodeState.DRAINING.value})


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    subject: str  # a node name or an instance id
    detail: str

    def line(self) -> str:
        return f"{self.kind}: {self.subject}: {self.detail}"


@dataclass(frozen=True)
class NodeRow:
    name: str
    state: str
    instance_id: str | None
    private_address: str | None
    history: tuple[tuple[str, str], ...]  # (old_state, new_state), oldest first


def read_rows(db_url: str) -> dict[str, NodeRow]:
    """The cloud nodes and their whole histories, straight from the database."""
    database = Database(db_url)
    try:
        with database.session() as session:
            nodes = list(session.scalars(select(Node).where(Node.kind == "cloud")))
            events: dict[int, list[tuple[str, str]]] = defaultdict(list)
            query = select(NodeEvent.node_id, NodeEvent.old_state, NodeEvent.new_state).order_by(
                NodeEvent.at, NodeEvent.id
            )
            for node_id, old, new in session.execute(query):
                events[node_id].append((old, new))
            return {
                n.name: NodeRow(
                    n.name, n.state, n.instance_id, n.private_address, tuple(events[n.id])
                )
                for n in nodes
            }
    finally:
        database.dispose()


def whole_requests(db_url: str) -> dict[str, int]:
    """The all-or-nothing requests the database issued: request id -> its node count."""
    database = Database(db_url)
    try:
        with database.session() as session:
            query = select(LaunchRequest.request_id, LaunchRequest.nodes).where(
                LaunchRequest.all_or_nothing.is_(True)
            )
            return {
                r: len([n for n in (nodes or "").split(",") if n])
                for r, nodes in session.execute(query)
            }
    finally:
        database.dispose()


def history_breaks(row: NodeRow) -> str | None:
    """Why the node's history does not end consistently with its row, or None."""
    if not row.history:
        return "no events at all"
    previous = None
    for old, new in row.history:
        if previous is not None and old != previous:
            return f"an event starts from {old} after one that ended in {previous}"
        if old != "NEW" and not can_transition(NodeState(old), NodeState(new)):
            return f"{old} -> {new} is not an allowed transition"
        previous = new
    if previous != row.state:
        return f"the last event ends in {previous}, the node is {row.state}"
    return None


def inspect(
    instances: Mapping[str, CloudInstance],
    rows: Mapping[str, NodeRow],
    slurm_addresses: Mapping[str, str],
    stray_namespaces: Iterable[str] = (),
    whole: Mapping[str, int] | None = None,
) -> list[Finding]:
    """Every finding for one moment of the cloud (`instances`: the provider's listing),
    the database (`rows`), Slurm (`slurm_addresses`: node -> NodeAddr) and the
    all-or-nothing requests (`whole`: request id -> its node count)."""
    live = {i: inst for i, inst in instances.items() if inst.state is not InstanceState.TERMINATED}
    holders: dict[str, list[str]] = defaultdict(list)
    for row in rows.values():
        if row.instance_id:
            holders[row.instance_id].append(row.name)
    found: list[Finding] = []
    per_node = Counter(inst.node_name for inst in live.values() if inst.node_name)
    for node, count in sorted(per_node.items()):
        if count > 1:
            ids = sorted(i for i, inst in live.items() if inst.node_name == node)
            found.append(Finding("duplicate", node, f"{count} live instances: {', '.join(ids)}"))
    for instance_id, names in sorted(holders.items()):
        if len(names) > 1:
            found.append(Finding("duplicate", instance_id, f"held by {', '.join(names)}"))
    for instance_id, inst in sorted(live.items()):
        if instance_id not in holders:
            found.append(
                Finding("orphan", instance_id, f"{inst.state.value}, tagged {inst.node_name}")
            )
    found += [Finding("orphan", ns, "namespace no running record names") for ns in stray_namespaces]
    for row in sorted(rows.values(), key=lambda r: r.name):
        found += _row_findings(row, live, slurm_addresses)
    per_request = Counter(inst.request_id for inst in live.values() if inst.request_id)
    for request_id, wanted in sorted((whole or {}).items()):
        got = per_request.get(request_id, 0)
        if 0 < got < wanted:
            found.append(Finding("partial", request_id, f"{got} of {wanted} instances live"))
    return found


def _row_findings(
    row: NodeRow, live: Mapping[str, CloudInstance], slurm_addresses: Mapping[str, str]
) -> list[Finding]:
    found = []
    mine = sorted(i for i, inst in live.items() if inst.node_name == row.name)
    forgotten = [i for i in mine if i != row.instance_id]
    if forgotten and not row.instance_id:
        found.append(Finding("lost", row.name, f"{row.state}, forgot {', '.join(forgotten)}"))
    if row.instance_id and row.instance_id not in live:
        found.append(Finding("lost", row.name, f"holds {row.instance_id}, the cloud has none"))
    if row.instance_id and row.state == NodeState.POWERED_DOWN.value:
        found.append(Finding("lost", row.name, f"POWERED_DOWN holding {row.instance_id}"))
    told = slurm_addresses.get(row.name)
    working = row.state in WORKING and row.instance_id in live
    if working and row.private_address != told:
        found.append(
            Finding("lost", row.name, f"at {row.private_address}, Slurm has NodeAddr={told}")
        )
    why = history_breaks(row)
    if why is not None:
        found.append(Finding("lost", row.name, f"history: {why}"))
    return found


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    tally = Counter(f.kind for f in findings)
    return {kind: tally.get(kind, 0) for kind in KINDS}

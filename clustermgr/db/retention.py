"""What the database keeps and for how long: history older than `[database]
retention_days` goes (node transitions, cluster events, launch request ids no node or
director holds any more, finished jobs' run times). Cost records (`instance_runs`) and
staging records stay: they are the site's bill and its users' own history.

A request id can go once no row holds it: an instance launched under it and still alive
was adopted (bound to a node, or recorded as a director's) within minutes of its launch,
so after the retention period its ownership rests on the instance id, not on the request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import CursorResult, delete, select

from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, Director, JobRun, LaunchRequest, Node, NodeEvent


@dataclass(frozen=True)
class Pruned:
    node_events: int
    cluster_events: int
    launch_requests: int
    job_runs: int = 0

    def summary(self) -> str:
        return (
            f"{self.node_events} node transitions, {self.cluster_events} cluster events, "
            f"{self.launch_requests} launch request ids, {self.job_runs} finished jobs' run times"
        )


def prune(database: Database, retention_days: float, now: datetime) -> Pruned:
    """Delete what is older than the retention period, in one transaction."""
    cutoff = now - timedelta(days=retention_days)
    held = (
        select(Node.request_id)
        .where(Node.request_id.is_not(None))
        .union(select(Director.request_id).where(Director.request_id.is_not(None)))
    )
    statements = (
        delete(NodeEvent).where(NodeEvent.at < cutoff),
        delete(ClusterEvent).where(ClusterEvent.at < cutoff),
        delete(LaunchRequest).where(
            LaunchRequest.issued_at < cutoff, LaunchRequest.request_id.not_in(held)
        ),
        delete(JobRun).where(JobRun.finished_at < cutoff),
    )
    with database.session() as session:
        counts = [_deleted(session.execute(statement)) for statement in statements]
    return Pruned(*counts)


def _deleted(result: object) -> int:
    return max(int(result.rowcount or 0), 0) if isinstance(result, CursorResult) else 0

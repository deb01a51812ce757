"""Protected mode: a template whose launches or boots keep failing stops launching.

A broken image, a revoked key or an exhausted quota otherwise turns demand into a loop of
instances that start, fail and are replaced. After `[daemon] protect_after_failures`
failures in a row (launch errors, boot timeouts, failed boot health checks; capacity is not
the template's fault and has its fallback) with no node of the template registering in
between, the template is protected: the plan launches nothing for it and its requested
nodes are powered down with `(Code:PROTECTED) ...`, so jobs can go to another template or
wait. It retries by itself once `protect_backoff_s` has passed since the last failure (one
more failure protects it again), or at once after `clustermgr templates reset NAME`.

The count is read from the node events (the reason_kind column), so it survives restarts
and needs no state of its own; a reset is a cluster event.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clustermgr.config import Settings
from clustermgr.db.models import ClusterEvent, Node, NodeEvent
from clustermgr.lifecycle import NodeState
from clustermgr.reasons import PROTECTED, Reason

COUNTED = ("QUOTA", "INVALID", "AUTH", "OTHER", "BOOT_TIMEOUT", "HEALTH", "RESUME_TIMEOUT")
RESET_EVENT = "template-reset"
MEMORY = timedelta(days=7)  # failures older than this are forgotten


@dataclass(frozen=True)
class TemplateHealth:
    template: str
    failures: int  # in a row, since the last registration or reset
    last_failure: datetime | None
    last_kind: str | None
    protected: str | None  # the (Code:PROTECTED) reason while protected
    retry_at: datetime | None


def template_health(session: Session, settings: Settings, now: datetime) -> list[TemplateHealth]:
    since = now - MEMORY
    good: dict[str, datetime] = {}
    registered = (
        select(Node.template, func.max(NodeEvent.at))
        .join(Node)
        .where(NodeEvent.at >= since)
        .where(NodeEvent.old_state == NodeState.BOOTING.value)
        .where(NodeEvent.new_state == NodeState.UP.value)
        .group_by(Node.template)
    )
    resets = (
        select(ClusterEvent.message, func.max(ClusterEvent.at))
        .where(ClusterEvent.kind == RESET_EVENT)
        .where(ClusterEvent.at >= since)
        .group_by(ClusterEvent.message)
    )
    for template, at in [*session.execute(registered), *session.execute(resets)]:
        if template and (template not in good or at > good[template]):
            good[template] = at
    failed = (
        select(Node.template, NodeEvent.at, NodeEvent.reason_kind)
        .join(Node)
        .where(NodeEvent.at >= since)
        .where(NodeEvent.new_state == NodeState.FAILED.value)
        .where(NodeEvent.reason_kind.in_(COUNTED))
        .order_by(NodeEvent.at)
    )
    counts: dict[str, list[tuple[datetime, str]]] = {}
    for template, at, kind in session.execute(failed):
        if template and (template not in good or _aware(at) > _aware(good[template])):
            counts.setdefault(template, []).append((at, kind or ""))
    return [judge(t.name, counts.get(t.name, []), settings, now) for t in settings.templates]


def judge(
    template: str, failures: Iterable[tuple[datetime, str]], settings: Settings, now: datetime
) -> TemplateHealth:
    listed = list(failures)
    limit = settings.daemon.protect_after_failures
    if not listed:
        return TemplateHealth(template, 0, None, None, None, None)
    last, kind = listed[-1]
    retry_at = _aware(last) + timedelta(seconds=settings.daemon.protect_backoff_s)
    protected = None
    if limit and len(listed) >= limit and now < retry_at:
        protected = str(
            Reason(
                PROTECTED,
                f"{len(listed)} launch/boot failures in a row (last {kind}); retry at "
                f"{retry_at:%H:%M} UTC or `clustermgr templates reset {template}`",
            )
        )
    return TemplateHealth(template, len(listed), last, kind, protected, retry_at)


def _aware(at: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes."""
    return at if at.tzinfo else at.replace(tzinfo=UTC)

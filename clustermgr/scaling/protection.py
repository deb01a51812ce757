"""Protected mode: a template whose launches or boots keep failing stops launching.

A broken image, a revoked key or an exhausted quota otherwise turns demand into a loop of
instances that start, fail and are replaced. After `[daemon] protect_after_failures`
failures in a row (launch errors, boot timeouts, failed boot health checks; capacity is not
the template's fault and has its fallback) with no node of the template registering in
between, or after one launch the cloud refused as INVALID (retrying it cannot help), the
template is protected: the plan launches nothing for it and its requested
nodes are powered down with `(Code:PROTECTED) ...`, so jobs can go to another template or
wait. It retries by itself once `protect_backoff_s` has passed since the last failure (one
more failure protects it again), or at once after `clustermgr templates reset NAME`.

A cloud that throttles or fails transiently (after the SDK's own retries) is not the
template's fault either, but launching into it every cycle is a hot loop: after such a
failure the template backs off (`[daemon] launch_backoff_s`, doubled per failure in a row up
to `launch_backoff_max_s`, reset by a launch that succeeds) and the plan refuses it with
`(Code:BACKOFF) ...` meanwhile, a kind neither rule counts.

The count is read from the node events (the reason_kind column), so it survives restarts
and needs no state of its own; a reset is a cluster event.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from clustermgr.config import Settings
from clustermgr.core.reasons import BACKOFF, PROTECTED, Reason
from clustermgr.db.models import ClusterEvent, Node, NodeEvent
from clustermgr.nodes.states import NodeState

BACKED_OFF = ("THROTTLED", "TRANSIENT")
COUNTED = ("QUOTA", "INVALID", "AUTH", "OTHER", "BOOT_TIMEOUT", "HEALTH", "RESUME_TIMEOUT", "POWER")
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
    backoff: str | None = None  # the (Code:BACKOFF) reason while backing off

    @property
    def blocked(self) -> str | None:
        """Why the template launches nothing now, if it does not."""
        return self.protected or self.backoff


def template_health(session: Session, settings: Settings, now: datetime) -> list[TemplateHealth]:
    since = now - MEMORY
    good = _last_move(session, since, NodeState.BOOTING, NodeState.UP)
    resets = (
        select(ClusterEvent.message, func.max(ClusterEvent.at))
        .where(ClusterEvent.kind == RESET_EVENT)
        .where(ClusterEvent.at >= since)
        .group_by(ClusterEvent.message)
    )
    for template, at in session.execute(resets):
        if template and (template not in good or _aware(at) > good[template]):
            good[template] = _aware(at)
    counts = _failures_since(session, since, COUNTED, good)
    # a launch that succeeded (LAUNCHING -> BOOTING) ends a busy cloud's run of failures
    busy = _failures_since(
        session,
        since,
        BACKED_OFF,
        _last_move(session, since, NodeState.LAUNCHING, NodeState.BOOTING),
    )
    return [
        replace(
            judge(t.name, counts.get(t.name, []), settings, now),
            backoff=judge_backoff(busy.get(t.name, []), settings, now),
        )
        for t in settings.templates
    ]


def _last_move(
    session: Session, since: datetime, old: NodeState, new: NodeState
) -> dict[str, datetime]:
    """Per template, when one of its nodes last moved old -> new."""
    query = (
        select(Node.template, func.max(NodeEvent.at))
        .join(Node)
        .where(NodeEvent.at >= since)
        .where(NodeEvent.old_state == old.value)
        .where(NodeEvent.new_state == new.value)
        .group_by(Node.template)
    )
    return {template: _aware(at) for template, at in session.execute(query) if template}


def _failures_since(
    session: Session, since: datetime, kinds: Iterable[str], after: dict[str, datetime]
) -> dict[str, list[tuple[datetime, str]]]:
    """Per template, its failures of `kinds` later than `after[template]`, oldest first."""
    failed = (
        select(Node.template, NodeEvent.at, NodeEvent.reason_kind)
        .join(Node)
        .where(NodeEvent.at >= since)
        .where(NodeEvent.new_state == NodeState.FAILED.value)
        .where(NodeEvent.reason_kind.in_(list(kinds)))
        .order_by(NodeEvent.at)
    )
    found: dict[str, list[tuple[datetime, str]]] = {}
    for template, at, kind in session.execute(failed):
        if template and (template not in after or _aware(at) > after[template]):
            found.setdefault(template, []).append((_aware(at), kind or ""))
    return found


def judge_backoff(
    failures: Iterable[tuple[datetime, str]], settings: Settings, now: datetime
) -> str | None:
    """The (Code:BACKOFF) reason while the template waits out its back-off, else None.
    Failures of one launch (a batch of nodes, same second) count once."""
    base = settings.daemon.launch_backoff_s
    launches = sorted({at.replace(microsecond=0): kind for at, kind in failures}.items())
    if not base or not launches:
        return None
    last, kind = launches[-1]
    wait = min(settings.daemon.launch_backoff_max_s, base * 2 ** (len(launches) - 1))
    retry_at = last + timedelta(seconds=wait)
    if now >= retry_at:
        return None
    return str(
        Reason(
            BACKOFF,
            f"{len(launches)} launch(es) in a row failed ({kind}): the cloud is busy or "
            f"unwell; next try at {retry_at:%H:%M:%S} UTC",
        )
    )


def judge(
    template: str, failures: Iterable[tuple[datetime, str]], settings: Settings, now: datetime
) -> TemplateHealth:
    listed = list(failures)
    if not listed:
        return TemplateHealth(template, 0, None, None, None, None)
    last, kind = listed[-1]
    return judge_count(template, len(listed), _aware(last), kind, settings, now)


def judge_count(
    template: str, count: int, last: datetime, kind: str, settings: Settings, now: datetime
) -> TemplateHealth:
    """`count` failures in a row, the last at `last` of `kind`. A launch the cloud refused
    as INVALID (an instance type the region does not offer, an unknown image) cannot pass
    by being tried again: one protects the template until it is fixed and reset."""
    limit = settings.daemon.protect_after_failures
    retry_at = last + timedelta(seconds=settings.daemon.protect_backoff_s)
    protected = None
    if limit and kind == "INVALID" and now < retry_at:
        protected = str(
            Reason(
                PROTECTED,
                f"the cloud refused its launch as INVALID (`clustermgr events --since 1d` says "
                f"why): fix the template, then `clustermgr templates reset {template}` "
                f"(else a retry at {retry_at:%H:%M} UTC)",
            )
        )
    elif limit and count >= limit and now < retry_at:
        protected = str(
            Reason(
                PROTECTED,
                f"{count} launch/boot failures in a row (last {kind}); retry at "
                f"{retry_at:%H:%M} UTC or `clustermgr templates reset {template}`",
            )
        )
    return TemplateHealth(template, count, last, kind, protected, retry_at)


def with_this_cycle(
    health: Mapping[str, TemplateHealth],
    failed: Mapping[str, Sequence[str]],
    registered: Collection[str],
    settings: Settings,
    now: datetime,
) -> dict[str, str]:
    """template -> why it launches nothing now, this cycle's verdicts counted: the failures
    reconcile judged now (template -> their kinds) move a template toward protection
    before the plan is made, a registration judged now starts its count again. (The
    database has them from the next cycle on; without this, the cycle that fails a batch
    for BOOT_TIMEOUT still launched the next one.)"""
    blocked: dict[str, str] = {}
    for template in settings.templates:
        known = health.get(template.name)
        kinds = [k for k in failed.get(template.name, ()) if k in COUNTED]
        if kinds:
            before = 0 if known is None or template.name in registered else known.failures
            judged = judge_count(template.name, before + len(kinds), now, kinds[-1], settings, now)
            why = judged.protected or (known.backoff if known else None)
        else:
            why = known.blocked if known else None
        if why:
            blocked[template.name] = why
    return blocked


def _aware(at: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes."""
    return at if at.tzinfo else at.replace(tzinfo=UTC)

"""Which listed instances are cm-scale's to terminate (orphans) and which it must leave
alone (foreign). Pure: judged from the snapshot, no writes, no calls.

A provider's listing is filtered by the cluster's tag, and tags prove nothing: anyone with
access to the cloud account, another tool, or a second cluster configured with the same
name can launch an instance carrying them. So an instance no node or director holds is an
orphan only when the database proves cm-scale launched it: its request id is one cm-scale
issued (committed before the launch call, so a crash between the two leaves it provable)
or its instance id is one cm-scale recorded. Anything else is foreign: reported (status,
an event, a metric) and never terminated, adopted or counted as capacity. A
`clustermgr-role=director` tag exempts nothing: an instance is a director's only when a
director row holds it (its instance id, or the request id of its launch in progress).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from clustermgr.db.ownership import Ownership
from clustermgr.directors.strays import TAG_ROLE
from clustermgr.providers.base import CloudInstance, InstanceState

TAG_LIMIT = 128  # a tag value as stored and shown; longer ones are cut
FOREIGN_VERDICT = "tagged as this cluster's, not launched by cm-scale: left alone"


@dataclass(frozen=True)
class ForeignInstance:
    """An instance with this cluster's tags that cm-scale never launched; the tag values are
    the cloud's, escaped (no control characters) and cut to TAG_LIMIT."""

    provider: str
    instance_id: str
    template: str
    request_id: str
    role: str
    state: str
    launched_at: datetime | None

    def describe(self) -> str:
        tags = [f"template tag {self.template or '-'}", f"request tag {self.request_id or '-'}"]
        if self.role:
            tags.append(f"role tag {self.role}")
        return f"{self.provider} {self.instance_id} ({', '.join(tags)})"


@dataclass(frozen=True)
class Sweep:
    orphans: dict[str, list[str]]  # provider -> instance ids to terminate
    foreign: dict[str, list[ForeignInstance]]  # provider -> instances to leave alone


def sweep(
    listings: Mapping[str, Mapping[str, CloudInstance]],
    ownership: Ownership,
    held: set[str],
    held_requests: frozenset[str],
    now: datetime,
    grace_s: float,
    skip: frozenset[str] = frozenset(),
) -> Sweep:
    """Every live listed instance no row holds, sorted into orphans (ours, older than the
    grace period) and foreign (not ours, at any age).

    `held`: instance ids node and director rows hold; `held_requests`: request ids whose
    instances are accounted for (a launch being re-issued, a director launch in progress);
    `skip`: providers that list nodes rather than instances (on-prem BMCs: every node they
    power is listed, held by a row or not, and none is ever an orphan)."""
    orphans: dict[str, list[str]] = {}
    foreign: dict[str, list[ForeignInstance]] = {}
    for provider, instance in unheld(listings, held, held_requests, skip):
        if not ownership.ours(instance.instance_id, instance.request_id):
            foreign.setdefault(provider, []).append(as_foreign(provider, instance))
            continue
        launched = instance.launch_time
        age = (now - launched).total_seconds() if launched else 0.0
        if age >= grace_s:
            orphans.setdefault(provider, []).append(instance.instance_id)
    return Sweep(orphans, foreign)


def unheld(
    listings: Mapping[str, Mapping[str, CloudInstance]],
    held: set[str],
    held_requests: frozenset[str] | set[str],
    skip: frozenset[str] = frozenset(),
) -> Iterator[tuple[str, CloudInstance]]:
    """Live listed instances no row holds, in provider and instance id order (what observe
    asks the database about, and what the sweep sorts)."""
    for provider, listing in sorted(listings.items()):
        if provider in skip:
            continue
        for instance in sorted(listing.values(), key=lambda i: i.instance_id):
            if instance.state is InstanceState.TERMINATED or instance.instance_id in held:
                continue
            if instance.request_id is not None and instance.request_id in held_requests:
                continue
            yield provider, instance


def as_foreign(provider: str, instance: CloudInstance) -> ForeignInstance:
    return ForeignInstance(
        provider=provider,
        instance_id=printable(instance.instance_id),
        template=printable(instance.template),
        request_id=printable(instance.request_id),
        role=printable(instance.tags.get(TAG_ROLE), 64),
        state=instance.state.value,
        launched_at=instance.launch_time,
    )


def printable(value: str | None, limit: int = TAG_LIMIT) -> str:
    """A cloud-supplied string made safe to log, store and print: every character that is
    not printable (newlines, U+2028, ANSI escapes) escaped, then cut to `limit`."""
    text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in (value or ""))
    return text[:limit]

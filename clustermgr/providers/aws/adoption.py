"""Binding a fleet's instances to nodes (one CreateTags each), and a relaunch's adoption.

A relaunch adopts before it creates (`LaunchSpec.resume`: a crash or a takeover
interrupted the request). EC2 answers a ClientToken it has seen with its first answer, but
not every EC2-compatible cloud honours tokens (moto does not), and a token cannot ask for
"the rest": so the instances that carry the request's tag are taken first.

Which ones: live (pending, running) instances of the request, either named for one of the
launch's nodes (the binding got that far) or unnamed (the fleet's answer was lost, or its
CreateTags were cut short). Named ones first, one per node; then unnamed ones, as many as
nodes are left. More than that (a cloud that started the request twice) are extra, and
released. An all-or-nothing launch that finds only part of its set (killed while releasing
a short answer) keeps none of it: that part is released and the set tried whole.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from clustermgr.providers.aws.client import MAX_WORKERS
from clustermgr.providers.aws.errors import NOT_FOUND_CODES, SDK_ERRORS
from clustermgr.providers.aws.shapes import Launched, tag_list, tags_of
from clustermgr.providers.base import TAG_NODE, LaunchError
from clustermgr.providers.skeleton import Failure, parallel

log = logging.getLogger(__name__)

ADOPTABLE_STATES = frozenset({"pending", "running"})
TAG_RETRY_DELAYS_S = (0.5, 1.0, 2.0)  # a new instance id may not be visible to CreateTags yet


@dataclass(frozen=True)
class Adopted:
    """What a relaunch takes, and what it still creates: `missing` instances, under client
    tokens of the request's with `part` added ("": the tokens as issued)."""

    keep: list[Launched]
    missing: int
    part: str = ""


@dataclass(frozen=True)
class Adoption:
    found: int  # live instances of the request for these nodes
    keep: list[Launched] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # instance ids to release
    partial_set: list[Launched] = field(default_factory=list)  # all or nothing: too few

    @property
    def partial(self) -> bool:
        return bool(self.partial_set)

    def describe(self) -> str:
        kept, released = len(self.keep), len(self.extra)
        return f"{self.found} instance(s) found, {kept} adopted, {released} released"


def choose(
    items: Iterable[Mapping[str, Any]], nodes: Sequence[str], count: int, whole: bool
) -> Adoption:
    """Which of the request's described instances the relaunch adopts (see the module)."""
    wanted = set(nodes)
    found = sorted(
        (
            item
            for item in items
            if (item.get("State") or {}).get("Name") in ADOPTABLE_STATES
            and tags_of(item).get(TAG_NODE, "") in wanted | {""}
        ),
        key=launch_order,
    )
    keep: list[Launched] = []
    extra: list[str] = []
    named: set[str] = set()
    for item in found:
        node = tags_of(item).get(TAG_NODE, "")
        if (node and node in named) or len(keep) >= count:
            extra.append(str(item["InstanceId"]))
            continue
        named.add(node)
        keep.append(launched_of(item))
    if whole and 0 < len(keep) < count:
        return Adoption(len(found), [], extra + [k.instance_id for k in keep], keep)
    return Adoption(len(found), keep, extra)


def launch_order(item: Mapping[str, Any]) -> tuple[bool, str, int, str]:
    """Named instances first; unnamed ones in the order the fleet started them, the order
    the killed process paired them with nodes in (its CreateTags may still land)."""
    launched = item.get("LaunchTime")
    return (
        not tags_of(item).get(TAG_NODE),
        launched.isoformat() if isinstance(launched, datetime) else str(launched or ""),
        int(item.get("AmiLaunchIndex") or 0),
        str(item["InstanceId"]),
    )


def launched_of(item: Mapping[str, Any]) -> Launched:
    """A DescribeInstances item as the launch answer that named it would have."""
    placement = item.get("Placement") or {}
    return Launched(
        instance_id=str(item["InstanceId"]),
        instance_type=str(item.get("InstanceType", "")),
        lifecycle="spot" if item.get("InstanceLifecycle") == "spot" else "on-demand",
        zone=placement.get("AvailabilityZone"),
        subnet=item.get("SubnetId"),
    )


def adopt(
    items: Iterable[Mapping[str, Any]],
    nodes: Sequence[str],
    whole: bool,
    request_id: str,
    release: Callable[[list[str]], list[str]],
) -> Adopted:
    """Adopt the request's live instances for `nodes` and release the extra ones (`release`
    returns the ids still live). Nothing found: everything is missing under the tokens as
    issued, so EC2 answers them with its first answer. Some found: the rest under tokens of
    their own (`a<K>`), as another count under the first tokens is another request to EC2.
    All or nothing with only part of the set: that part released, the set tried whole;
    what could not be released is returned alone (failed whole by the engine)."""
    count = len(nodes)
    choice = choose(items, nodes, count, whole)
    if choice.found:
        log.info("request %s (relaunch): %s", request_id, choice.describe())
    left = set(release(choice.extra)) if choice.extra else set()
    if choice.partial and left:
        return Adopted([lnch for lnch in choice.partial_set if lnch.instance_id in left], 0)
    if choice.partial:
        return Adopted([], count, f"a{choice.found}")
    if not choice.keep:
        return Adopted([], count)
    return Adopted(choice.keep, count - len(choice.keep), f"a{len(choice.keep)}")


def tag_nodes(
    ec2: Callable[[], Any],
    failure_of: Callable[[BaseException], Failure],
    pairs: list[tuple[str, str]],
    errors: list[LaunchError],
) -> set[str]:
    """One CreateTags per (instance, node): the node tag and Name; the ids that failed."""
    if not pairs:
        return set()

    def tag(instance_id: str, node: str) -> Failure | None:
        request = {"Resources": [instance_id], "Tags": tag_list({TAG_NODE: node, "Name": node})}
        for delay in (*TAG_RETRY_DELAYS_S, None):
            try:
                ec2().create_tags(**request)
                return None
            except SDK_ERRORS as exc:
                failure = failure_of(exc)
                if failure.code not in NOT_FOUND_CODES or delay is None:
                    return failure
                time.sleep(delay)
        return None

    outcomes = parallel(lambda p: tag(*p), pairs, MAX_WORKERS, "aws-tag")
    failed: set[str] = set()
    for (iid, _), failure in zip(pairs, outcomes, strict=True):
        if failure is not None:
            failed.add(iid)
            errors.append(failure.launch_error(count=1))
    return failed

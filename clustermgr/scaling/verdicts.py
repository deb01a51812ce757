"""The verdict table: (database state x cloud instance x Slurm node) -> what to do.

Every cloud node is sorted into one verdict each cycle from the one snapshot observe took;
the rows below are the whole rule book, first match wins, and every combination matches a
row (a unit test enumerates them, and docs/architecture.md prints the table). A crash at
any point of a cycle leaves the node in a row whose verdict finishes the interrupted work,
so a restarted daemon converges within one reconcile cycle.

Some rows depend on a condition besides the three states, named in the `when` column:
`expired` (the boot timeout has passed since launch), `policy_mode` (the template's
nodes are launched by policies; Slurm only powers them up when told) and `stale_image`
(the node reports an image revision other than the one its region's director serves:
imaging/node_revisions.py). A node cm-scale drained for its image (`(Code:IMAGE)`) is
then "sick" like one the health check drained: its jobs finish, and it is stopped idle.

A policy-mode slot that Slurm powers up while no launch owns it (no job on it) is powered
down again, not launched: Slurm 22.05 keeps a power-up request it has not acted on through
a later POWER_DOWN_FORCE and carries it out once the node is down (a node stopped or failed
right after its wake), and launching for that would start an instance no job wants.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clustermgr.core.reasons import HEALTH, IMAGE, kind_of
from clustermgr.nodes.states import NodeState
from clustermgr.providers.base import CloudInstance, InstanceState
from clustermgr.workload.base import WorkloadNode


class CloudSeen(enum.StrEnum):
    """The node's instance as the provider's tag-filtered listing shows it."""

    UNLISTED = "unlisted"  # the provider could not be listed this cycle: judge nothing
    NONE = "none"  # the node holds no instance and none tagged for it waits
    WAITING = "waiting"  # an unbound instance tagged with the node's request and name
    ALIVE = "alive"  # its instance is pending or running
    GONE = "gone"  # its instance is missing, terminated or in error


class SlurmSeen(enum.StrEnum):
    """The node as sinfo shows it (checked in this order)."""

    MISSING = "missing"  # not in Slurm's node list
    SICK_OUT = "sick-out"  # health-check reason, taken out (powered down or not drained)
    SICK_BUSY = "sick-busy"  # health-check or image reason, drained, jobs still running
    SICK_IDLE = "sick-idle"  # health-check or image reason, drained and idle
    POWERING_DOWN = "powering-down"
    UNTOLD = "untold"  # holds an instance whose address Slurm does not have
    HELD = "held"  # drained by clustermgr's hold (a launch's), not powered down
    REGISTERED = "registered"  # slurmd answers: not powered down, not powering up, not DOWN
    POWERING_UP = "powering-up"  # Slurm is bringing it up for a job it placed there
    WOKEN = "woken"  # Slurm is bringing it up with no job on it (told to, or by itself)
    POWERED_DOWN = "powered-down"
    DOWN = "down"  # DOWN or not responding, not powering up


class Verdict(enum.StrEnum):
    KEEP = "keep"  # nothing to do (Slurm's facts are still copied)
    RESUME = "resume"  # Slurm wants the node: demand for this cycle's plan
    ADOPT = "adopt"  # bind the waiting instance, tell Slurm its address
    RELAUNCH = "relaunch"  # re-issue the interrupted launch whole, same request id
    REGISTER = "register"  # BOOTING -> UP
    TELL_SLURM = "tell-slurm"  # Slurm lacks the address or the power-up: tell it again
    WAIT_BOOT = "wait-boot"  # booting within its timeout
    BOOT_TIMEOUT = "boot-timeout"  # fail: slurmd never registered
    VANISHED = "vanished"  # fail: the instance is gone
    UNHEALTHY = "unhealthy"  # fail with the health check's reason
    DRAIN = "drain"  # UP -> DRAINING: the health check drained it, jobs still run
    RETIRE = "retire"  # UP -> DRAINING: drain it in Slurm, it runs a stale image revision
    STOP = "stop"  # stop: Slurm powered it down, or drained and idle after a bad check
    FINISH_STOP = "finish-stop"  # STOPPING: terminate, power down, record POWERED_DOWN
    FINISH_FAIL = "finish-fail"  # FAILED: terminate, POWER_DOWN_FORCE, record POWERED_DOWN
    RESUME_TIMEOUT = "resume-timeout"  # fail: Slurm's ResumeFailProgram gave up on it
    POWER_DOWN = "power-down"  # Slurm powers up a slot no launch owns: power it down again


FAILING = frozenset(
    {Verdict.BOOT_TIMEOUT, Verdict.VANISHED, Verdict.UNHEALTHY, Verdict.RESUME_TIMEOUT}
)
FINISHING = frozenset({Verdict.FINISH_FAIL, Verdict.FINISH_STOP})
ANY = "*"


@dataclass(frozen=True)
class Rule:
    states: frozenset[NodeState] | str  # ANY or the database states the row covers
    cloud: frozenset[CloudSeen] | str
    slurm: frozenset[SlurmSeen] | str
    verdict: Verdict
    when: str = ""  # "expired" or "policy_mode": the row applies only when it holds
    why: str = ""

    def matches(
        self, state: NodeState, cloud: CloudSeen, slurm: SlurmSeen, facts: frozenset[str]
    ) -> bool:
        return (
            (self.states == ANY or state in self.states)
            and (self.cloud == ANY or cloud in self.cloud)
            and (self.slurm == ANY or slurm in self.slurm)
            and (not self.when or self.when in facts)
        )


def _s(*states: NodeState) -> frozenset[NodeState]:
    return frozenset(states)


def _c(*seen: CloudSeen) -> frozenset[CloudSeen]:
    return frozenset(seen)


def _l(*seen: SlurmSeen) -> frozenset[SlurmSeen]:
    return frozenset(seen)


S, C, L, V = NodeState, CloudSeen, SlurmSeen, Verdict
BOUND = _s(S.BOOTING, S.UP, S.DRAINING)
LISTED = _c(C.ALIVE, C.UNLISTED)  # Slurm-driven rows need no listing
SICK = _l(L.SICK_BUSY, L.SICK_IDLE)

RULES: tuple[Rule, ...] = (
    # slots without an instance
    Rule(
        _s(S.POWERED_DOWN),
        ANY,
        _l(L.WOKEN, L.HELD),
        V.POWER_DOWN,
        when="policy_mode",
        why="no job, no launch: a stale power-up or a failure Slurm never heard",
    ),
    Rule(
        _s(S.POWERED_DOWN),
        ANY,
        _l(L.POWERING_UP, L.WOKEN),
        V.RESUME,
        why="a resume request we missed",
    ),
    Rule(
        _s(S.POWERED_DOWN),
        ANY,
        _l(L.HELD),
        V.RESUME,
        why="powered up for a launch whose failure Slurm never heard",
    ),
    Rule(_s(S.REQUESTED), ANY, ANY, V.RESUME, why="Slurm asked for it; the plan launches it"),
    Rule(_s(S.LAUNCHING), _c(C.UNLISTED), ANY, V.KEEP, why="cannot see the cloud: wait"),
    Rule(_s(S.LAUNCHING), _c(C.WAITING, C.ALIVE), ANY, V.ADOPT, why="launched, never bound"),
    Rule(_s(S.LAUNCHING), _c(C.NONE, C.GONE), ANY, V.RELAUNCH, why="launch interrupted"),
    # instances that are gone
    Rule(BOUND, _c(C.GONE), ANY, V.VANISHED, why="spot reclaim or deleted outside"),
    # finishing what a crash interrupted
    Rule(_s(S.STOPPING), _c(C.UNLISTED), ANY, V.KEEP, why="cannot see the cloud: wait"),
    Rule(_s(S.STOPPING), ANY, ANY, V.FINISH_STOP, why="stop interrupted or in progress"),
    Rule(_s(S.FAILED), _c(C.UNLISTED), ANY, V.KEEP, why="cannot see the cloud: wait"),
    Rule(_s(S.FAILED), ANY, ANY, V.FINISH_FAIL, why="failure handling interrupted"),
    # the health check's verdicts
    Rule(BOUND, LISTED, _l(L.SICK_OUT), V.UNHEALTHY, why="health check took it out"),
    Rule(_s(S.BOOTING), LISTED, _l(L.SICK_BUSY), V.REGISTER, why="it runs jobs: it is up"),
    Rule(_s(S.BOOTING), LISTED, _l(L.SICK_IDLE), V.STOP, why="drained by the health check"),
    Rule(_s(S.UP), LISTED, SICK, V.DRAIN, why="drained by the health check"),
    Rule(_s(S.DRAINING), LISTED, _l(L.SICK_IDLE), V.STOP, why="drained and idle: replace it"),
    Rule(
        _s(S.UP),
        LISTED,
        _l(L.REGISTERED),
        V.RETIRE,
        when="stale_image",
        why="runs an image revision its director no longer serves: drain it",
    ),
    # booting
    Rule(_s(S.BOOTING), LISTED, _l(L.REGISTERED), V.REGISTER, why="slurmd registered"),
    Rule(_s(S.BOOTING), _c(C.UNLISTED), ANY, V.KEEP, why="cannot see the cloud: wait"),
    Rule(_s(S.BOOTING), ANY, ANY, V.BOOT_TIMEOUT, when="expired", why="never registered"),
    Rule(_s(S.BOOTING), ANY, _l(L.UNTOLD), V.TELL_SLURM, why="crashed before Slurm was told"),
    Rule(_s(S.BOOTING), ANY, _l(L.HELD), V.TELL_SLURM, why="crashed before the hold was released"),
    Rule(
        _s(S.BOOTING),
        ANY,
        _l(L.POWERED_DOWN),
        V.TELL_SLURM,
        when="policy_mode",
        why="crashed before Slurm was told to power it up",
    ),
    Rule(_s(S.BOOTING), ANY, _l(L.POWERED_DOWN), V.STOP, why="Slurm gave up on it"),
    Rule(_s(S.BOOTING), ANY, ANY, V.WAIT_BOOT, why="booting"),
    # up
    Rule(_s(S.UP, S.DRAINING), _c(C.ALIVE), _l(L.UNTOLD), V.TELL_SLURM, why="Slurm lost it"),
    Rule(
        _s(S.UP, S.DRAINING), _c(C.ALIVE), _l(L.POWERED_DOWN), V.STOP, why="Slurm powered it down"
    ),
    Rule(ANY, ANY, ANY, V.KEEP),
)


@dataclass(frozen=True)
class Judged:
    """One node's verdict, with what the act phase needs to carry it out."""

    node: str
    verdict: Verdict
    state: NodeState
    cloud: CloudSeen
    slurm: SlurmSeen
    reason: str = ""  # the reason to record (and give Slurm) for fail and stop verdicts
    instance: CloudInstance | None = None  # ADOPT's waiting instance, TELL_SLURM's own


@functools.cache
def judge(
    state: NodeState, cloud: CloudSeen, slurm: SlurmSeen, facts: frozenset[str] = frozenset()
) -> Rule:
    for rule in RULES:
        if rule.matches(state, cloud, slurm, facts):
            return rule
    raise AssertionError("the last rule matches everything")


def cloud_seen(
    instance_id: str | None,
    listing: Mapping[str, CloudInstance] | None,
    waiting: CloudInstance | None,
) -> CloudSeen:
    if listing is None:
        return CloudSeen.UNLISTED
    if instance_id:
        found = listing.get(instance_id)
        if found is None or found.state in (InstanceState.TERMINATED, InstanceState.ERROR):
            return CloudSeen.GONE
        return CloudSeen.ALIVE
    return CloudSeen.WAITING if waiting is not None else CloudSeen.NONE


def slurm_seen(seen: WorkloadNode | None, address: str | None) -> SlurmSeen:
    """`address`: the instance's private address when the node holds one."""
    if seen is None:
        return SlurmSeen.MISSING
    kind = kind_of(seen.reason)
    if kind == HEALTH:
        if seen.powered_down or "POWERING_DOWN" in seen.flags or not seen.drained:
            return SlurmSeen.SICK_OUT
        return SlurmSeen.SICK_IDLE if seen.state == "IDLE" else SlurmSeen.SICK_BUSY
    if "POWERING_DOWN" in seen.flags:
        return SlurmSeen.POWERING_DOWN
    if address and seen.address != address:
        return SlurmSeen.UNTOLD  # even if its slurmd got through: Slurm cannot reach it
    if kind == IMAGE and seen.drained and not seen.powered_down and not seen.power_up_asked:
        return SlurmSeen.SICK_IDLE if seen.idle else SlurmSeen.SICK_BUSY  # a stale revision
    if seen.held and not seen.powered_down:
        return SlurmSeen.HELD  # powering up or registered, but no job may go there yet
    if (
        seen.responding
        and not seen.powering_up
        and not seen.powered_down
        and seen.state not in ("DOWN", "FUTURE", "UNKNOWN")
    ):
        return SlurmSeen.REGISTERED
    if seen.powering_up or (seen.powered_down and seen.state in ("ALLOCATED", "MIXED")):
        return SlurmSeen.POWERING_UP if seen.state in ("ALLOCATED", "MIXED") else SlurmSeen.WOKEN
    if seen.powered_down:
        return SlurmSeen.POWERED_DOWN
    return SlurmSeen.DOWN


def table_rows(rules: Sequence[Rule] = RULES) -> list[tuple[str, str, str, str, str, str]]:
    """The table as text cells: (database, cloud, Slurm, when, verdict, why)."""

    def cell(value: frozenset[enum.StrEnum] | str) -> str:
        return value if isinstance(value, str) else ", ".join(sorted(str(v) for v in value))

    return [
        (cell(r.states), cell(r.cloud), cell(r.slurm), r.when, str(r.verdict), r.why) for r in rules
    ]


def table_markdown() -> str:
    lines = [
        "| database state | cloud instance | Slurm node | when | verdict | why |",
        "|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in table_rows()]
    return "\n".join(lines)

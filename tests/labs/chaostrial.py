"""The crash campaign's trial (issue 9, item 2): a burst and a scale-down through cm-scale
(the daemon), SIGKILLed at a seeded point of each, restarted for one reconcile cycle, and
the cloud compared with the database (tests/labs/chaoscheck.py). The labs per cloud are in
tests/labs/chaoslab.py; this is what they share.

A trial (one seed):
1. burst: a job array of one task per node is submitted (policy mode: queue_depth
   launches one node per task); cm-scale runs as the daemon and its process group is
   killed with SIGKILL at the trial's burst point; `cm-scale --once` runs one cycle;
   the check runs; the daemon then runs until the burst has come to rest (every node
   powered down or bound and known to Slurm at its address; local: every job ran).
2. scale-down: the lab makes the nodes go (`begin_scale_down`); killed at the trial's
   scale-down point, restarted for one cycle, checked again.
3. finish: the daemon runs until every node is POWERED_DOWN, no instance is left and Slurm
   holds every node powered down: the next trial starts from nothing. A lab that cannot
   get there is stuck, and the campaign stops (LabStuck).

Points (POINTS): the wrapped `scontrol` of cm-scale's [slurm] bin_dir stops dead on the
call a point names (test_crash_windows.py's way); a cloud fake holds the request a point
names, before or after acting on it (tests/fakes/gate.py); the local provider stalls where
its faults.json says (providers/local/state.py); `timer` kills at a seeded moment. The
trial's seed picks the points (round robin, so a campaign covers them all) and their
parameters: which request of a batch is held, the moment, how many nodes lack capacity.
The burst point of seed s is the (s mod n)th, its scale-down point turns one further every
n seeds, so consecutive seeds pair the points differently.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from clustermgr.core.hostlists import compress
from clustermgr.providers.base import CloudInstance, InstanceState
from tests.labs import chaoscheck
from tests.labs.chaoscheck import Finding
from tests.labs.procgroup import stop_group
from tests.labs.slurmlab import SlurmLab

SLURM_CLIENTS = ("sinfo", "squeue", "sbatch", "scancel", "sacct", "srun", "sacctmgr")
BLOCKING_SCONTROL = """#!/bin/sh
# The real scontrol, except for the call named in {block}: that one never returns.
if [ -f '{block}' ]; then
  case " $* " in
    *"$(cat '{block}')"*) : > '{reached}'; exec sleep 600 ;;
  esac
fi
exec /usr/bin/scontrol "$@"
"""
POINTS = {
    "timer": "a seeded moment of the phase",
    "wake": "LAUNCHING committed, Slurm asked to power the nodes up, the cloud not yet called",
    "launch-sent": "a launch request held before the cloud acted on it (never carried out)",
    "launch-done": "the cloud launched; its answer never reached cm-scale",
    "binding": "instances exist, some named or finished, the database binds none",
    "namespace": "a node's namespace and slurmd exist, its record does not say it runs",
    "untold": "instances bound (BOOTING committed), Slurm not told their addresses",
    "held": "addresses told, the launch's hold (drain) not released",
    "failing": "FAILED committed for the nodes the cloud had no capacity for, Slurm not told",
    "stopping": "STOPPING committed, Slurm being told, nothing terminated",
    "terminate-sent": "a terminate request held before the cloud acted on it",
    "terminate-done": "the cloud terminated; its answer never reached cm-scale",
    "releasing": "an all-or-nothing answer came back short; its release held before acting",
}
BURST, DOWN = "burst", "scale-down"


class LabStuck(RuntimeError):
    """The lab could not get back to nothing running: the campaign cannot go on."""


@dataclass(frozen=True)
class Catch:
    """How a trial catches cm-scale at its point."""

    point: str
    scontrol: str | None = None  # stop dead on the scontrol call whose arguments hold this
    gate: str | None = None  # hold the cloud request whose key holds this...
    nth: int = 1  # ...the nth of them...
    after: bool = False  # ...after the cloud acted on it
    stall: str | None = None  # local: faults.json stall at "launch" or "terminate"
    delay_s: float = 0.0  # timer: kill this long after the daemon started
    short_by: int = 0  # the cloud lacks capacity for this many of the nodes
    scarce_at_restart: bool = False  # the restarted cycle finds room for less than a job

    def describe(self) -> str:
        if self.scarce_at_restart:
            return f"{replace(self, scarce_at_restart=False).describe()} (scarce at restart)"
        if self.point == "timer":
            return f"timer {self.delay_s:.1f} s"
        if self.gate is not None and self.nth > 1:
            return f"{self.point} (request {self.nth})"
        if self.short_by:
            return f"{self.point} ({self.short_by} short)"
        return self.point


@dataclass
class TrialResult:
    lab: str
    seed: int
    points: dict[str, str] = field(default_factory=dict)  # phase -> what was hit
    missed: list[str] = field(default_factory=list)  # a point never reached (killed anyway)
    findings: list[tuple[str, Finding]] = field(default_factory=list)  # (phase, finding)
    restarts: list[str] = field(default_factory=list)  # the restarted cycle's summary lines
    errors: list[str] = field(default_factory=list)  # a restarted cycle that failed
    laps: dict[str, float] = field(default_factory=dict)  # seconds per part of the trial
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        return chaoscheck.counts(f for _, f in self.findings)

    def line(self) -> str:
        tally = ", ".join(f"{n} {k}" for k, n in self.counts().items())
        hit = "; ".join(f"{phase}: {what}" for phase, what in self.points.items())
        miss = f"; MISSED {', '.join(self.missed)}" if self.missed else ""
        miss += f"; RESTART FAILED {'; '.join(self.errors)}" if self.errors else ""
        laps = " ".join(f"{part} {seconds:.1f}" for part, seconds in self.laps.items())
        return f"{self.lab} seed {self.seed}: {hit}{miss}; {tally}; {self.seconds:.1f} s ({laps})"


@dataclass
class Armed:
    """A catch in place: `reached(elapsed_s)` polls it, `disarm()` undoes it."""

    reached: Callable[[float], bool]
    disarm: Callable[[], None]


def pick(points: tuple[str, ...], index: int) -> str:
    chosen = points[index % len(points)]
    assert chosen in POINTS, f"unknown point {chosen!r}"
    return chosen


class ChaosLab:
    """What every cloud's lab shares: cm-scale's wrapped scontrol, the daemon, the kill,
    the restarted cycle and the check. Subclasses say how to burst, catch and scale down."""

    name = ""
    points: Mapping[str, tuple[str, ...]] = {}
    per_node_s = 0.02  # the timer's window: about how long a burst takes per node
    settle_s = 60.0

    def __init__(self, workdir: Path, nodes: list[str]):
        self.workdir = workdir
        self.nodes = nodes
        self.bin_dir = workdir / "slurm-bin"
        self.block = workdir / "block-scontrol"
        self.reached_file = workdir / "scontrol-blocked"
        self.log_path = workdir / "cm-scale.log"
        self.bin = Path(sys.executable).parent

    # --- what subclasses provide -----------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        raise NotImplementedError

    @property
    def db_url(self) -> str:
        raise NotImplementedError

    @property
    def slurm(self) -> SlurmLab:
        raise NotImplementedError

    def list_instances(self) -> dict[str, CloudInstance]:
        raise NotImplementedError

    def stray_namespaces(self) -> list[str]:
        return []

    def catch(self, point: str, rng: random.Random, phase: str) -> Catch:
        raise NotImplementedError

    def arm_cloud(self, catch: Catch) -> Armed:
        raise NotImplementedError

    def settled(self) -> bool:
        raise NotImplementedError

    def begin_scale_down(self) -> None:
        """What makes the nodes go (called with the daemon running)."""

    def prepare(self) -> None:
        """Before a trial, with nothing running."""

    # --- the scontrol that stops dead ------------------------------------------------------

    def make_bin_dir(self) -> Path:
        self.bin_dir.mkdir(exist_ok=True)
        for client in SLURM_CLIENTS:
            link = self.bin_dir / client
            if not link.exists():
                link.symlink_to(f"/usr/bin/{client}")
        scontrol = self.bin_dir / "scontrol"
        scontrol.write_text(BLOCKING_SCONTROL.format(block=self.block, reached=self.reached_file))
        scontrol.chmod(0o755)
        return self.bin_dir

    def arm(self, catch: Catch) -> Armed:
        if catch.scontrol is not None:
            self.reached_file.unlink(missing_ok=True)
            self.block.write_text(catch.scontrol)
            cloud = self.arm_cloud(catch) if catch.short_by else None

            def unblock() -> None:
                self.block.unlink(missing_ok=True)
                self.reached_file.unlink(missing_ok=True)
                if cloud is not None:
                    cloud.disarm()

            return Armed(lambda _elapsed: self.reached_file.exists(), unblock)
        if catch.point == "timer":
            return Armed(lambda elapsed: elapsed >= catch.delay_s, lambda: None)
        return self.arm_cloud(catch)

    # --- the daemon, killed ------------------------------------------------------------------

    @contextlib.contextmanager
    def daemon(self) -> Iterator[subprocess.Popen[bytes]]:
        """cm-scale as a service, in its own process group; SIGTERM at the end if alive."""
        with self.log_path.open("ab") as log:
            process = subprocess.Popen(
                [str(self.bin / "cm-scale")],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            yield process
        finally:
            stop_group(process, 30)

    def kill_at(self, catch: Catch, begin: Callable[[], None] | None = None) -> bool:
        """Run the daemon until the catch is reached, then SIGKILL its process group, as
        systemd kills a unit's cgroup. False when the point was never reached (the daemon
        is killed all the same, at the time limit)."""
        armed = self.arm(catch)
        limit = 60.0 + 0.3 * len(self.nodes)
        try:
            with self.daemon() as process:
                start = time.monotonic()
                if begin is not None:
                    begin()
                while not armed.reached(time.monotonic() - start):
                    if process.poll() is not None:
                        raise AssertionError(f"cm-scale exited by itself\n{self.log_tail()}")
                    if time.monotonic() - start > limit:
                        os.killpg(process.pid, signal.SIGKILL)
                        process.wait(10)
                        return False
                    time.sleep(0.05)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
                return True
        finally:
            armed.disarm()

    def once(self) -> tuple[str, bool]:
        """The restarted cm-scale: one cycle. (its summary line, whether it failed)."""
        done = subprocess.run(
            [str(self.bin / "cm-scale"), "--once"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        summary = (done.stdout.strip().splitlines() or [""])[-1]
        if done.returncode:
            summary += f" (exit {done.returncode}: {done.stderr.strip()[-300:]})"
        return summary, done.returncode != 0

    def run_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Run the daemon until `condition()` holds (True) or `timeout_s` passes."""
        with self.daemon():
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if condition():
                    return True
                time.sleep(0.5)
        return condition()

    # --- the check ---------------------------------------------------------------------------

    def slurm_addresses(self) -> dict[str, str]:
        out = self.slurm.run("sinfo", "-N", "-h", "-o", "%N %o").stdout
        return dict(line.split(None, 1) for line in out.splitlines() if len(line.split()) == 2)

    def inspect(self) -> list[Finding]:
        return chaoscheck.inspect(
            self.list_instances(),
            chaoscheck.read_rows(self.db_url),
            self.slurm_addresses(),
            self.stray_namespaces(),
            chaoscheck.whole_requests(self.db_url),
        )

    def restart_capacity(self, scarce: bool) -> Callable[[], None]:
        """Make the restarted cycle find room for less than one job (all-or-nothing labs);
        returns what lifts it."""
        return lambda: None

    def clean(self) -> bool:
        return not self.unclean()

    def unclean(self) -> str:
        """What is left ("" when nothing): a node holding or wanting an instance, a listed
        instance, a stray namespace, a node Slurm does not hold powered down and at rest."""
        rows = chaoscheck.read_rows(self.db_url)
        busy_rows = [r.name for r in rows.values() if r.state != "POWERED_DOWN" or r.instance_id]
        if busy_rows:
            return f"rows not powered down: {compress(busy_rows)}"
        listed = self.list_instances().values()
        live = [i.instance_id for i in listed if i.state is not InstanceState.TERMINATED]
        if live:
            return f"instances: {', '.join(sorted(live)[:5])}"
        strays = self.stray_namespaces()
        if strays:
            return f"namespaces: {', '.join(strays)}"
        flags = self.slurm_flags()
        resting = {"DRAIN", "POWERED_DOWN"}
        busy = {"POWERING_DOWN", "POWERING_UP", "POWER_UP", "POWER_DOWN"}
        moving = [n for n in self.nodes if not resting <= flags[n] or busy & flags[n]]
        if moving:
            return f"Slurm: {moving[0]} is {'+'.join(sorted(flags[moving[0]]))}"
        return ""

    def slurm_flags(self) -> dict[str, set[str]]:
        """Node -> its state flags (a pending POWER_UP shows only here, not in `%T`)."""
        data = json.loads(self.slurm.run("sinfo", "--json").stdout)
        return {
            str(n["name"]): {str(f) for f in n.get("state_flags") or []}
            for n in data.get("nodes", [])
        }

    # --- a trial -----------------------------------------------------------------------------

    def demand(self) -> None:
        self.slurm.run(
            "sbatch",
            "--parsable",
            f"--array=1-{len(self.nodes)}",
            f"--chdir={self.workdir}",
            f"--output={self.workdir}/job-%A_%a.out",
            "--wrap",
            "hostname",
        )

    def trial(self, seed: int) -> TrialResult:
        result = TrialResult(self.name, seed)
        rng = random.Random(f"{self.name}:{seed}")
        start = time.monotonic()
        if not self.clean():
            raise LabStuck(f"{self.name}: not clean before seed {seed}\n{self.diagnosis()}")
        self.prepare()
        phases: list[tuple[str, Callable[[], None] | None]] = [
            (BURST, None),
            (DOWN, self.begin_scale_down),
        ]
        for phase, begin in phases:
            turn = seed if phase == BURST else seed + seed // len(self.points[BURST])
            point = pick(self.points[phase], turn)
            catch = self.catch(point, rng, phase)
            if phase == BURST:
                self.demand()
            result.points[phase] = catch.describe()
            lap = time.monotonic()
            if not self.kill_at(catch, begin):
                result.missed.append(f"{phase}: {catch.describe()}")
            lift = self.restart_capacity(catch.scarce_at_restart)
            try:
                summary, failed = self.once()
            finally:
                lift()
            result.restarts.append(summary)
            if failed:
                result.errors.append(f"{phase}: {summary}")
            result.findings += [(phase, f) for f in self.inspect()]
            result.laps[phase] = time.monotonic() - lap
            if phase == BURST:
                lap = time.monotonic()
                if not self.run_until(self.settled, self.settle_s):
                    raise LabStuck(f"{self.name}: the burst never completed\n{self.diagnosis()}")
                result.laps["settle"] = time.monotonic() - lap
        lap = time.monotonic()
        if not self.run_until(self.clean, 90.0 + 0.3 * len(self.nodes)):
            raise LabStuck(f"{self.name}: not clean after seed {seed}\n{self.diagnosis()}")
        result.laps["finish"] = time.monotonic() - lap
        result.seconds = time.monotonic() - start
        return result

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def diagnosis(self) -> str:
        parts = [
            self.slurm.run("squeue", "-h", "-o", "%i %T %r", check=False).stdout[-1500:],
            self.slurm.run("sinfo", "-N", "-h", "-o", "%N %T %o %E", check=False).stdout[-3000:],
        ]
        rows = chaoscheck.read_rows(self.db_url)
        parts.append(" ".join(f"{r.name}={r.state}:{r.instance_id}" for r in rows.values()))
        parts.append(f"instances: {sorted(self.list_instances())}")
        parts.append("cm-scale: " + self.log_tail())
        return "\n".join(parts)

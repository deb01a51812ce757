"""Slurm through its command-line clients: argv lists, a timeout on every call.

`sinfo --json` (data v0.0.38 on Slurm 22.05) for nodes; `scontrol` for actions. Every
failure is a WorkloadError naming the command and Slurm's own one-line message.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clustermgr.core import progress_marks
from clustermgr.core.errors import WorkloadError
from clustermgr.core.inputs import ADDRESS_RULE, is_host_address, slurm_word_problem
from clustermgr.core.node_report import NodeReport, parse_extra
from clustermgr.workload.base import (
    PendingJob,
    RunningJob,
    WorkloadNode,
    WorkloadSnapshot,
    comment_text,
    parse_gpu_gres,
    reason_arg,
)
from clustermgr.workload.squeue import (
    JOB_ID,
    PENDING_FORMAT,
    RUNNING_FORMAT,
    parse_pending,
    parse_running,
)

ADDRESS_BATCH = 100
COMMENT_BATCH = 100  # job ids per `scontrol update jobid=...`
log = logging.getLogger("clustermgr.workload")


class SlurmCli:
    def __init__(self, bin_dir: Path = Path("/usr/bin"), timeout_s: float = 30.0):
        self.bin_dir = bin_dir
        self.timeout_s = timeout_s

    def run(self, command: str, *args: str, timeout_s: float | None = None) -> str:
        """Run one Slurm client and return its stdout; WorkloadError on any failure."""
        path = self.bin_dir / command
        argv = [str(path), *args]
        shown = " ".join([command, *args])[:120]
        progress_marks.step(f"Slurm's `{command}`")
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                timeout=timeout_s or self.timeout_s,
                env={**os.environ, "LC_ALL": "C"},
                check=False,
            )
        except FileNotFoundError:
            raise WorkloadError(
                f"{path} not found: install Slurm's clients or set [slurm] bin_dir"
            ) from None
        except subprocess.TimeoutExpired:
            raise WorkloadError(
                f"`{shown}` did not answer within {timeout_s or self.timeout_s:.0f} s "
                "(is slurmctld running and reachable?)"
            ) from None
        progress_marks.beat()
        if done.returncode != 0:
            stdout, stderr = (out.decode("utf-8", "replace") for out in (done.stdout, done.stderr))
            message = _first_line(stderr) or _first_line(stdout) or "no message"
            raise WorkloadError(f"`{shown}` failed (exit {done.returncode}): {message}")
        try:
            return done.stdout.decode("utf-8")
        except UnicodeDecodeError as exc:  # node names are ASCII: this output is not Slurm's
            raise WorkloadError(
                f"`{shown}` printed bytes that are not UTF-8 (at byte {exc.start}): "
                "nothing done on it"
            ) from None

    def run_json(self, command: str, *args: str) -> dict[str, Any]:
        text = self.run(command, *args, "--json")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                f"`{command} --json` printed invalid JSON (line {exc.lineno}): {exc.msg}"
            ) from None
        if not isinstance(data, dict):
            raise WorkloadError(f"`{command} --json` printed {type(data).__name__}, not an object")
        return data

    # --- observation -------------------------------------------------------------------

    def nodes(self) -> dict[str, WorkloadNode]:
        data = self.run_json("sinfo")
        return parse_sinfo_nodes(data)

    def node_states(self) -> dict[str, WorkloadNode]:
        return self.nodes()

    def pending_jobs(self) -> list[PendingJob]:
        """Pending jobs, one record per job or pending array (tasks counted, not expanded)."""
        text = self.run("squeue", "--noheader", "--states=PENDING", f"--Format={PENDING_FORMAT}")
        return parse_pending(text)

    def running_jobs(self) -> list[RunningJob]:
        text = self.run(
            "squeue",
            "--noheader",
            "--states=RUNNING,CONFIGURING,COMPLETING",
            f"--Format={RUNNING_FORMAT}",
        )
        return parse_running(text)

    def snapshot(self) -> WorkloadSnapshot:
        return WorkloadSnapshot(
            taken_at=datetime.now(UTC),
            nodes=self.nodes(),
            pending=self.pending_jobs(),
            running=self.running_jobs(),
        )

    def config_values(self) -> dict[str, str]:
        """`scontrol show config` as key -> value."""
        values: dict[str, str] = {}
        for line in self.run("scontrol", "show", "config").split("\n"):
            key, sep, value = line.partition("=")
            if sep and key.strip() and " " not in key.strip():
                values[key.strip()] = value.strip()
        return values

    # --- actions -------------------------------------------------------------------------

    def update_nodes(self, nodes: Sequence[str], **fields: str) -> None:
        """`scontrol update nodename=LIST key=value ...` (one call for the whole list)."""
        if not nodes:
            return

        args = [
            f"nodename={node_list(nodes)}",
            *(f"{key}={value}" for key, value in fields.items()),
        ]
        self.run("scontrol", "update", *args)

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """`scontrol update NodeName=a,b NodeAddr=x,y NodeHostname=a,b`, 100 nodes a call
        (lists pair up by position, as ParallelCluster batches it)."""
        pairs = sorted(addresses.items())
        node_list(name for name, _ in pairs)
        for name, address in pairs:  # callers pass checked addresses: never one that is not
            if not is_host_address(address):
                raise WorkloadError(f"node {name}: address {address!r} is not {ADDRESS_RULE}")
        for start in range(0, len(pairs), ADDRESS_BATCH):
            batch = pairs[start : start + ADDRESS_BATCH]
            names = ",".join(name for name, _ in batch)
            self.run(
                "scontrol",
                "update",
                f"nodename={names}",
                f"nodeaddr={','.join(address for _, address in batch)}",
                f"nodehostname={names}",
            )

    def power_up(self, nodes: Sequence[str]) -> None:
        self.update_nodes(nodes, state="POWER_UP")

    def power_down(self, nodes: Sequence[str], reason: str, force: bool = False) -> None:
        state = "POWER_DOWN_FORCE" if force else "POWER_DOWN"
        self._update_with_reason(nodes, state, reason)

    def set_down(self, nodes: Sequence[str], reason: str) -> None:
        self._update_with_reason(nodes, "DOWN", reason)

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        self._update_with_reason(nodes, "DRAIN", reason)

    def _update_with_reason(self, nodes: Sequence[str], state: str, reason: str) -> None:
        if not nodes:
            return

        self.run(
            "scontrol",
            "update",
            f"nodename={node_list(nodes)}",
            f"state={state}",
            reason_arg(reason),
        )

    def undrain(self, nodes: Sequence[str]) -> None:
        """`state=UNDRAIN`: unlike RESUME it keeps the base state (a DOWN node stays DOWN)
        and accepts a node that is not drained (RESUME fails: "Invalid node state")."""
        self.update_nodes(nodes, state="UNDRAIN")

    def comment_jobs(self, jobs: Sequence[str], text: str) -> None:
        """`scontrol update jobid=A,B,... comment=TEXT`, COMMENT_BATCH jobs a call. scontrol
        takes the comment whole from its argument (quotes would be stored as part of it);
        a pending array (`12_[1-50]`) is updated by its array's id. Every batch is tried:
        a job that ended since the snapshot fails its batch (Slurm still updates the
        others), and the first failure is raised after the last batch."""
        ids = [job_arg(job) for job in jobs]
        value = comment_text(text)
        failed: WorkloadError | None = None
        for start in range(0, len(ids), COMMENT_BATCH):
            batch = ",".join(dict.fromkeys(ids[start : start + COMMENT_BATCH]))
            try:
                self.run("scontrol", "update", f"jobid={batch}", f"comment={value}")
            except WorkloadError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed


def node_list(nodes: Iterable[str]) -> str:
    """The hostlist for `scontrol update nodename=`; every name one Slurm word (scontrol
    splits its arguments on spaces again: a name with one would add a field of its own)."""
    from clustermgr.core.hostlists import compress

    names = list(nodes)
    for name in names:
        problem = slurm_word_problem(name)
        if problem:
            raise WorkloadError(f"scontrol update not run: node {problem}")
    return compress(names)


def job_arg(job_id: str) -> str:
    """A job id for `scontrol update jobid=`: one squeue printed (checked again: it goes
    into argv), a pending array's record (`12_[1-50]`) as its array's id."""
    if not JOB_ID.fullmatch(job_id):
        raise WorkloadError(f"scontrol update not run: {job_id[:40]!r} is not a job id")
    return job_id.split("_[", 1)[0]


def _first_line(text: str) -> str:
    for line in (text or "").split("\n"):
        if line.strip():
            return line.strip()[:300]
    return ""


def _state_words(raw: Any) -> list[str]:
    if isinstance(raw, list):
        return [str(item).upper() for item in raw]
    if isinstance(raw, str):
        return [word.upper() for word in raw.replace("+", " ").split()]
    return []


def parse_sinfo_nodes(data: Mapping[str, Any]) -> dict[str, WorkloadNode]:
    """`sinfo --json` -> nodes by name. Accepts the 22.05 layout and the later list states."""
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list):
        raise WorkloadError("`sinfo --json` has no 'nodes' list: unsupported Slurm output")
    nodes: dict[str, WorkloadNode] = {}
    for number, raw in enumerate(raw_nodes, 1):
        node = _checked_node(number, raw)
        if node is None:
            continue
        if node.name in nodes:  # one record per partition on some versions
            merged = nodes[node.name].partitions + node.partitions
            node = _replace_partitions(node, tuple(dict.fromkeys(merged)))
        nodes[node.name] = node
    return nodes


def _checked_node(number: int, raw: Any) -> WorkloadNode | None:
    """The node of one `sinfo --json` record, or None (with a warning naming the record
    and the node) when it cannot be one: the rest of the nodes are still read."""
    name = raw.get("name") if isinstance(raw, dict) else None
    if not isinstance(name, str) or not name:
        log.warning("`sinfo --json` node record %d skipped: it has no name", number)
        return None
    problem = slurm_word_problem(name)
    if problem:
        log.warning("`sinfo --json` node record %d skipped: %s", number, problem)
        return None
    try:
        return _parse_node(raw)
    except (TypeError, ValueError, AttributeError) as exc:
        log.warning("`sinfo --json` node %s skipped: a field of the wrong type (%s)", name, exc)
        return None


def _replace_partitions(node: WorkloadNode, partitions: tuple[str, ...]) -> WorkloadNode:
    from dataclasses import replace

    return replace(node, partitions=partitions)


def _parse_node(raw: Mapping[str, Any]) -> WorkloadNode:
    words = _state_words(raw.get("state"))
    base = next((w for w in words if w in BASE_STATES), words[0] if words else "UNKNOWN")
    flags = {w for w in words if w != base} | set(_state_words(raw.get("state_flags")))
    model, gpus = parse_gpu_gres(str(raw.get("gres") or ""))
    features = raw.get("active_features") or raw.get("features") or ""
    if isinstance(features, list):
        features = ",".join(str(f) for f in features)
    return WorkloadNode(
        name=str(raw["name"]),
        state=base,
        flags=frozenset(flags),
        cpus=_int(raw.get("cpus")),
        memory_mb=_int(raw.get("real_memory")),
        gpus=gpus,
        gpu_model=model,
        partitions=tuple(str(p) for p in raw.get("partitions") or ()),
        features=tuple(f for f in str(features).split(",") if f),
        address=str(raw.get("address") or "") or None,
        hostname=str(raw.get("hostname") or "") or None,
        reason=str(raw.get("reason") or ""),
        report=_report(str(raw["name"]), raw.get("extra")),
    )


def _report(name: str, extra: Any) -> NodeReport | None:
    """The node's own report from its Extra field; junk is skipped with a warning (the
    node then reports nothing, and nothing is judged on it)."""
    if not isinstance(extra, str) or not extra:
        return None
    report, problem = parse_extra(extra)
    if problem:
        log.warning("node %s: its image report (Slurm's Extra field) skipped: %s", name, problem)
    return report


BASE_STATES = frozenset(
    {"IDLE", "ALLOCATED", "MIXED", "DOWN", "UNKNOWN", "ERROR", "FUTURE", "COMPLETING"}
)


def _int(value: Any) -> int:
    if isinstance(value, dict):  # later Slurm versions wrap numbers: {"set": true, "number": 4}
        value = value.get("number")
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0

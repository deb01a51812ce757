"""Workload trace readers: SWF, sacct (-P or --json) and the Alibaba GPU pod CSV, as one job list.

Readers never drop a line silently: whatever cannot become a job is a `Rejected` entry with its
line number and a short reason, so a replay can say how much of the trace it really used.

SWF (Parallel Workloads Archive, plain or gzip): fields 1 job, 2 submit, 4 run time, 5 allocated
processors (else 8 requested), 9 requested time, 12 user, 16 partition; `; UnixStartTime:` gives
the origin. A job of at least `procs_per_node` processors gets whole nodes (cpus 0), as many as
its processors fill; a smaller one shares a node, asking for its processors as CPUs (Slurm packs
such jobs onto nodes). With the default of 1 every processor is a whole node.

sacct -P, made with (-X: allocations only; `.`-steps in other output are skipped, not rejected):

    sacct -a -X -P -S <start> -E <end> --format=JobID,Submit,Start,End,Elapsed,NNodes,NCPUS,\
AllocTRES,ReqTRES,Timelimit,Partition,User,State

Columns are found by header name, in any order, extra ones ignored. Required: JobID, Submit,
Elapsed, NNodes, NCPUS, State. Optional: End (no End = still running), AllocTRES / ReqTRES
(gres/gpu and mem; ReqTRES only when AllocTRES is empty), Timelimit, Partition, User. Start is
accepted but not needed. A zone-less Submit is read in this machine's local zone (as Python does):
run sacct and the simulator with the same TZ.

sacct --json (`sacct -a -X -S <start> -E <end> --json`): the "jobs" list; Slurm 23.02+ shapes
({set, infinite, number} numbers, state.current lists) and the 21.08/22.05 ones (plain ints,
state strings) both read. Rejected.line is the job's 1-based index in that list.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path
from typing import Any

from clustermgr.core.errors import ClusterMgrError

FORMATS = ("swf", "sacct", "alibaba")


class TraceError(ClusterMgrError):
    """A trace that cannot be read at all; bad single lines are `Rejected` entries instead."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_s: float  # seconds since the trace's first submit (first job = 0.0)
    nodes: int  # nodes the job needs (>= 1)
    cpus: int  # CPUs per node it needs; 0 = the whole node (exclusive, SWF)
    gpus: int  # GPUs per node (0 for CPU jobs)
    memory_mb: int  # per node, 0 = unknown
    requested_s: float | None  # time limit; None when the trace does not say
    run_s: float  # actual run time, > 0
    partition: str  # "" when unknown
    user: str  # "" when unknown


@dataclass(frozen=True)
class Rejected:
    line: int  # 1-based line number (sacct --json: 1-based index in the jobs list)
    why: str

    @property
    def reason(self) -> str:
        """`why` without its values (numbers, quoted cells): what lines are counted by."""
        return _VALUES.sub("N", self.why)


_VALUES = re.compile(r"'[^']*'|\"[^\"]*\"|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def rejected_by_reason(rejected: list[Rejected]) -> dict[str, int]:
    """How many lines were rejected for each reason, the commonest first."""
    return dict(Counter(r.reason for r in rejected).most_common())


@dataclass(frozen=True)
class Trace:
    source: str
    format: str  # "swf", "sacct-json", "sacct", "alibaba"
    jobs: list[TraceJob]
    rejected: list[Rejected]
    origin: datetime | None  # absolute time of submit_s == 0, when the trace knows it
    procs_per_node: int | None = None  # SWF: the processors of one of its nodes


# A job before submit times are made relative: (submit, job_id, nodes, cpus, gpus, memory_mb,
# requested_s, run_s, partition, user). Tuples, because building each TraceJob once is cheaper.
_Row = tuple[float, str, int, int, int, int, float | None, float, str, str]
# Readers return their rows and the Unix time of submit 0 (None when the trace has no clock).
_Rows = tuple[list[_Row], float | None]
_MakeRow = Callable[[dict[str, str]], _Row | None]  # a table row from cells by column name


class _Bad(Exception):
    """One line cannot become a job; the message is its `Rejected.why`."""


def read_trace(path: Path, fmt: str | None = None, *, procs_per_node: int = 1) -> Trace:
    """Read a whole trace; `fmt` None guesses it. Raises TraceError only for the file as a whole."""
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r} (use one of: {', '.join(FORMATS)})")
    if procs_per_node < 1:
        raise TraceError(f"procs_per_node must be at least 1, not {procs_per_node}")
    text = _read_text(path)
    kind = fmt or _guess(path, text)
    rejected: list[Rejected] = []
    if kind == "swf":
        rows, origin = _read_swf(text, procs_per_node, rejected)
    elif kind == "alibaba":
        rows, origin = _read_table(path, text, ",", _ALIBABA_NEED, _alibaba_row, rejected), None
    elif _first_line(text)[1][:1] in ("{", "["):
        kind = "sacct-json"
        rows, origin = _read_sacct_json(path, text, rejected)
    else:
        rows, origin = _read_table(path, text, "|", _SACCT_NEED, _sacct_row, rejected), 0.0
    if not rows:
        first = f"; first: line {rejected[0].line}: {rejected[0].why}" if rejected else ""
        raise TraceError(f"{path}: no usable jobs ({len(rejected)} lines rejected{first})")
    rows.sort(key=itemgetter(0))  # stable: equal submits keep file order
    t0 = rows[0][0]
    jobs = [TraceJob(j, s - t0, n, c, g, m, q, r, p, u) for s, j, n, c, g, m, q, r, p, u in rows]
    per_node = procs_per_node if kind == "swf" else None
    return Trace(str(path), kind, jobs, rejected, _origin(origin, t0), per_node)


def _origin(base: float | None, t0: float) -> datetime | None:
    """The datetime of the first submit; None also for a clock no datetime can hold."""
    try:
        return None if base is None else datetime.fromtimestamp(base + t0, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def guess_format(path: Path) -> str:
    """One of FORMATS, from the name (.swf, .json) or else the first non-comment line."""
    return _guess(path, _read_text(path, 65536))


def _read_text(path: Path, size: int = -1) -> str:
    """Gunzipped by magic bytes (names lie), bad UTF-8 replaced so field checks reject it."""
    try:
        with path.open("rb") as raw:
            data = raw.read(size)
            if data[:2] == b"\x1f\x8b":
                raw.seek(0)
                with gzip.GzipFile(fileobj=raw) as unzipped:
                    data = unzipped.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        why = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        raise TraceError(f"cannot read trace {path}: {why or type(exc).__name__}") from None
    return data.decode("utf-8", errors="replace")


def _first_line(text: str) -> tuple[bool, str]:
    """(saw `;` header lines, first line that is neither blank nor a comment), without split()."""
    start, headers = 0, False
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end].strip()
        start = end + 1
        if line.startswith(";"):
            headers = True
        elif line and not line.startswith("#"):
            return headers, line
    return headers, ""


def _guess(path: Path, text: str) -> str:
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".swf"):
        return "swf"
    if name.endswith(".json"):
        return "sacct"
    headers, line = _first_line(text)
    if line[:1] in ("{", "[") or "jobid" in [c.strip() for c in line.lower().split("|")]:
        return "sacct"
    if {"name", "cpu_milli", "num_gpu"} <= {c.strip().lower() for c in line.split(",")}:
        return "alibaba"
    if headers or (len(line.split()) == 18 and _all_numbers(line.split())):
        return "swf"
    raise TraceError(
        f"{path}: cannot tell the trace format from its name or first line"
        f" (give one of: {', '.join(FORMATS)})"
    )


def _all_numbers(fields: list[str]) -> bool:
    try:
        return math.isfinite(sum(map(float, fields)))
    except ValueError:
        return False


def _read_swf(text: str, ppn: int, rejected: list[Rejected]) -> _Rows:
    rows: list[_Row] = []
    unix_start: int | None = None
    for number, line in enumerate(text.split("\n"), 1):
        parts = line.split()
        if not parts:
            continue
        if parts[0][0] == ";":
            body = line.strip()[1:].strip()
            if body.startswith("UnixStartTime:") and unix_start is None:
                value = body.partition(":")[2].strip()
                unix_start = int(value) if value.isdigit() else None
            continue
        if len(parts) != 18:
            rejected.append(Rejected(number, f"{len(parts)} fields, need 18"))
            continue
        try:
            v = list(map(float, parts))
            if not math.isfinite(sum(v)):
                raise ValueError
        except ValueError:
            bad = next((i for i, p in enumerate(parts, 1) if not _all_numbers([p])), 0)
            rejected.append(Rejected(number, f"field {bad} not a number: {parts[bad - 1]!r}"))
            continue
        run, procs = v[3], v[4] if v[4] != -1 else v[7]
        if run <= 0:
            why = f"run time {parts[3]}" + (" (unknown)" if run == -1 else "")
        elif v[1] < 0:
            why = f"submit time {parts[1]}"
        elif procs == -1:
            why = "processors unknown (fields 5 and 8 are -1)"
        elif procs <= 0:
            why = f"{procs:g} processors"
        else:
            limit = v[8] if v[8] > 0 else None
            where = (parts[15] if v[15] != -1 else "", parts[11] if v[11] != -1 else "")
            shared = int(procs) if procs < ppn else 0
            rows.append((v[1], parts[0], math.ceil(procs / ppn), shared, 0, 0, limit, run, *where))
            continue
        rejected.append(Rejected(number, why))
    return rows, unix_start


def _read_table(
    path: Path, text: str, sep: str, need: tuple[str, ...], make_row: _MakeRow, rej: list[Rejected]
) -> list[_Row]:
    """Rows of a header-first table, cells keyed by lower-cased column name (any order)."""
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    if first == len(lines):
        return []
    names = [name.strip().lower() for name in lines[first].split(sep)]
    col = {name: i for i, name in reversed(list(enumerate(names)))}
    missing = [n for n in need if n.lower() not in col]
    if missing:
        raise TraceError(f"{path}: header lacks required column(s) {', '.join(missing)}")
    rows: list[_Row] = []
    for number, line in enumerate(lines[first + 1 :], first + 2):
        if not line.strip():
            continue
        parts = line.split(sep)
        try:
            if len(parts) != len(names):
                raise _Bad(f"{len(parts)} fields, need {len(names)}")
            row = make_row({name: parts[i].strip() for name, i in col.items()})
        except _Bad as bad:
            rej.append(Rejected(number, str(bad)))
            continue
        if row is not None:
            rows.append(row)
    return rows


_SACCT_NEED = ("JobID", "Submit", "Elapsed", "NNodes", "NCPUS", "State")
_NO_END = ("", "unknown", "none")
_NO_LIMIT = ("", "unlimited", "partition_limit", "infinite", "none", "invalid")


def _sacct_row(cells: dict[str, str]) -> _Row | None:
    if "." in cells["jobid"]:
        return None  # a job step; its job has its own line
    state = (cells["state"].split() or ["?"])[0].upper()
    if state == "PENDING":
        raise _Bad("state PENDING (never ran)")
    if cells.get("end", "").lower() in _NO_END and ("end" in cells or state == "RUNNING"):
        raise _Bad(f"state {state} without an End (still running)")
    elapsed = _duration(cells["elapsed"])
    if elapsed is None:
        raise _Bad(f"bad Elapsed {cells['elapsed']!r}")
    if elapsed <= 0:
        raise _Bad("Elapsed 0 (never ran)")
    try:
        submit = datetime.fromisoformat(cells["submit"]).timestamp()
    except (ValueError, OverflowError, OSError):
        raise _Bad(f"bad Submit {cells['submit']!r}") from None
    nodes = _positive_int("NNodes", cells["nnodes"])
    ncpus = _positive_int("NCPUS", cells["ncpus"])
    limit_text = cells.get("timelimit", "")
    limit = None if limit_text.lower() in _NO_LIMIT else _duration(limit_text)
    if limit is None and limit_text.lower() not in _NO_LIMIT:
        raise _Bad(f"bad Timelimit {limit_text!r}")
    gpus, memory = _tres_text(cells.get("alloctres") or cells.get("reqtres", ""))
    per_node = (-(-ncpus // nodes), -(-gpus // nodes), -(-memory // nodes))
    where = (cells.get("partition", ""), cells.get("user", ""))
    return (submit, cells["jobid"], nodes, *per_node, limit or None, elapsed, *where)


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise _Bad(f"bad {name} {text!r}") from None
    if value <= 0:
        raise _Bad(f"{name} {value}")
    return value


def _duration(text: str) -> float | None:
    """Seconds in Slurm's [D-]HH:MM:SS, D-HH[:MM], HH:MM:SS, MM:SS or MM forms; None if not one."""
    days, dash, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if len(parts) > 3 or (dash and not days.isdigit()):
        return None
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS count from hours
        parts += ["0"] * (3 - len(parts))
    else:  # MM, MM:SS, HH:MM:SS count from minutes
        parts = ["0"] * (3 - len(parts)) + parts if len(parts) > 1 else ["0", parts[0], "0"]
    try:
        hours, minutes, seconds = int(parts[0]), int(parts[1]), float(parts[2])
    except ValueError:
        return None
    total = int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds
    return total if math.isfinite(total) and min(hours, minutes, seconds) >= 0 else None


def _tres_text(tres: str) -> tuple[int, int]:
    """(GPUs, memory MB) of a whole job from `cpu=4,mem=16G,gres/gpu=2,gres/gpu:a100=2`."""
    counts: dict[str, float] = {}
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key in ("mem", "gres/gpu") or key.startswith("gres/gpu:"):  # not gres/gpumem
            unit = value[-1:].upper()
            scale = _MEM_SCALE.get(unit, 1.0) if key == "mem" else 1.0
            try:
                counts[key] = float(value[:-1] if unit in _MEM_SCALE else value) * scale
            except ValueError:
                counts[key] = math.nan
            if not 0 <= counts[key] < math.inf:
                raise _Bad(f"bad TRES {item!r}")
    return _gpus(counts), math.ceil(counts.get("mem", 0))


_MEM_SCALE = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


def _gpus(counts: dict[str, float]) -> int:
    """The untyped gres/gpu total when present: typed entries repeat it, they do not add to it."""
    if "gres/gpu" in counts:
        return math.ceil(counts["gres/gpu"])
    return math.ceil(sum(v for k, v in counts.items() if k.startswith("gres/gpu:")))


def _read_sacct_json(path: Path, text: str, rejected: list[Rejected]) -> _Rows:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: not valid JSON: {exc}") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        raise TraceError(f"{path}: no 'jobs' list, not sacct --json output")
    rows: list[_Row] = []
    for number, job in enumerate(jobs, 1):
        try:
            rows.append(_json_job(job))
        except _Bad as bad:
            rejected.append(Rejected(number, str(bad)))
    return rows, 0.0


def _num(value: Any) -> float | None:
    """A number from a plain value or Slurm's {set, infinite, number}; None when unset/infinite."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value < 0xFFFFFFFE else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json_job(job: Any) -> _Row:
    if not isinstance(job, dict) or job.get("job_id") is None:
        raise _Bad("no job_id")
    state: Any = job.get("state")
    state = state.get("current") if isinstance(state, dict) else state
    state = state[0] if isinstance(state, list) and state else state
    state = state.upper() if isinstance(state, str) else "?"
    if state == "PENDING":
        raise _Bad("state PENDING (never ran)")
    time = _dict(job.get("time"))
    submit, elapsed = _num(time.get("submission")), _num(time.get("elapsed"))
    if not submit or submit < 0:
        raise _Bad("no time.submission")
    if not _num(time.get("end")):
        raise _Bad(f"state {state} without an end time (still running)")
    if elapsed is None:
        raise _Bad("no time.elapsed")
    if elapsed <= 0:
        raise _Bad("elapsed 0 (never ran)")
    limit = _num(time.get("limit"))
    tres = _dict(job.get("tres"))
    counts = _tres_json(tres.get("allocated")) or _tres_json(tres.get("requested"))
    required = _dict(job.get("required"))
    nodes = _num(job.get("allocation_nodes")) or _num(job.get("node_count")) or counts.get("node")
    cpus = counts.get("cpu") or _num(required.get("CPUs"))
    if not nodes or nodes < 1:
        raise _Bad("no node count")
    if not cpus or cpus < 1:
        raise _Bad("no CPU count")
    cpn, gpn, mpn = (math.ceil(x / nodes) for x in (cpus, _gpus(counts), counts.get("mem", 0)))
    part, user = (v if isinstance(v, str) else "" for v in (job.get("partition"), job.get("user")))
    limit_s = limit * 60 if limit else None
    return (submit, str(job["job_id"]), int(nodes), cpn, gpn, mpn, limit_s, elapsed, part, user)


def _tres_json(items: Any) -> dict[str, float]:
    """[{type, name, count}] -> {"cpu": 4, "mem": 2048, "gres/gpu": 2}; bad entries skipped."""
    counts: dict[str, float] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("type"), str):
            count = _num(item.get("count"))
            name = item.get("name")
            if count is not None:
                counts[f"{item['type']}/{name}" if name else item["type"]] = count
    return counts


_ALIBABA_NEED = (
    *("name", "cpu_milli", "memory_mib", "num_gpu"),
    *("creation_time", "deletion_time", "scheduled_time"),
)


def _alibaba_row(cells: dict[str, str]) -> _Row:
    if not cells["scheduled_time"]:
        raise _Bad("no scheduled_time (never scheduled)")
    if not cells["deletion_time"]:
        raise _Bad("no deletion_time (still running)")
    value: dict[str, float] = {}
    for name in (*_ALIBABA_NEED[1:], "gpu_milli"):
        text = cells.get(name, "0")
        try:
            value[name] = float(text or "0")
        except ValueError:
            raise _Bad(f"bad {name} {text!r}") from None
        if not math.isfinite(value[name]) or value[name] < 0:
            raise _Bad(f"bad {name} {text!r}")
    run = value["deletion_time"] - value["scheduled_time"]
    if run <= 0:
        raise _Bad(f"run time {run:g}")
    # A shared GPU (gpu_milli < 1000) still occupies one whole GPU of a node; cpus 0 would mean
    # "the whole node", so a pod asks for at least one CPU.
    gpus = max(math.ceil(value["num_gpu"]), 1 if value["gpu_milli"] > 0 else 0)
    cpus, memory = max(1, math.ceil(value["cpu_milli"] / 1000)), math.ceil(value["memory_mib"])
    return (value["creation_time"], cells["name"], 1, cpus, gpus, memory, None, run, "", "")

"""Slurm power-save hooks: ResumeProgram, SuspendProgram, ResumeFailProgram.

They run as SlurmUser on the active controller, so they must be fast and never block:
each validates the node names against the config's templates (raw TOML, no pydantic),
writes one JSON request file into the spool directory (atomic rename), pokes the daemon's
socket if it is there, and returns. No cloud API call, no database import.

Spool layout: <state_dir>/spool/<time>-<pid>-<kind>.json, {"kind", "nodes", "jobs", "at"}.
cm-scale creates the directory root:<SlurmUser's group> 0730 (clustermgr/runtime/statedir.py), and
accepts a request only from a regular file of one link owned by root or SlurmUser.
"""

from __future__ import annotations

import _socket  # the C module: socket.py's enum set-up would cost ~3 ms per hook run
import errno
import json
import os
import stat
import time
import tomllib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from clustermgr.core.errors import ConfigError, UsageError, WorkloadError
from clustermgr.core.hostlists import HostlistError, compress, expand
from clustermgr.core.reasons import DAEMON, Reason

# Slurm runs each hook as a fresh process and waits for it: this module imports only what
# recording a request needs (no dataclasses, subprocess or workload.base; see power_down_now).

HOOK_KINDS = ("resume", "suspend", "resume-fail")
SPOOL = "spool"
SOCKET = "cm-scale.sock"


class HookRequest(NamedTuple):
    kind: str
    nodes: tuple[str, ...]
    jobs: Mapping[str, tuple[str, ...]]  # job id -> its nodes (from SLURM_RESUME_FILE)
    at: float
    path: Path | None = None


class HookConfig(NamedTuple):
    state_dir: Path
    owners: dict[str, str]  # node name -> template
    heartbeat_stale_s: float
    slurm_bin: Path


def raw_hook_config(path: Path) -> HookConfig:
    """What a hook needs, read straight from the TOML file (no validation library)."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from None
    daemon = data.get("daemon", {})
    state_dir = Path(daemon.get("state_dir", "/var/lib/clustermgr"))
    owners: dict[str, str] = {}
    for template in data.get("templates", []):
        try:
            for name in expand(str(template.get("nodes", ""))):
                owners[name] = str(template.get("name"))
        except HostlistError as exc:
            raise ConfigError(f"{path}: template {template.get('name')!r}: {exc}") from None
    return HookConfig(
        state_dir=state_dir,
        owners=owners,
        heartbeat_stale_s=float(daemon.get("heartbeat_stale_s", 120)),
        slurm_bin=Path(data.get("slurm", {}).get("bin_dir", "/usr/bin")),
    )


RESUME_FILE_MAX = 16 * 1024 * 1024  # far above 5,000 nodes in 5,000 jobs


def parse_resume_file(
    text: str, nodes: Collection[str] | None = None, warn: Callable[[str], None] | None = None
) -> dict[str, tuple[str, ...]]:
    """SLURM_RESUME_FILE: {"jobs": [{"job_id": 1, "nodes": "c[1-2]"}], "all_nodes": ...}
    as slurmctld 22.05.8 writes it (a job's "nodes_resume", where a release names it so, is
    read first): job id -> the nodes resumed for it, which all-or-nothing templates
    launch together. Outside input: an item that is not a job id with a hostlist of nodes
    from the hook's argument (`nodes`, when given) is skipped with a warning; a file that is
    not that shape at all only loses the grouping (the hostlist argument is authoritative)."""
    say = warn or _to_stderr
    try:
        data = json.loads(text)
    except ValueError as exc:
        say(f"SLURM_RESUME_FILE is not JSON ({str(exc)[:80]}): jobs not grouped")
        return {}
    items = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(items, list):
        say("SLURM_RESUME_FILE has no list of jobs: jobs not grouped")
        return {}
    jobs: dict[str, tuple[str, ...]] = {}
    for index, item in enumerate(items):
        job_id, names, problem = _resume_item(item, nodes)
        if problem:
            say(f"SLURM_RESUME_FILE jobs[{index}]: {problem}: skipped")
        else:
            jobs[job_id] = names
    return jobs


def _resume_item(item: object, nodes: Collection[str] | None) -> tuple[str, tuple[str, ...], str]:
    """(job id, its nodes, "") for a good item, else ("", (), what is wrong)."""
    if not isinstance(item, dict):
        return "", (), "not an object"
    job_id = item.get("job_id")
    if isinstance(job_id, bool) or not isinstance(job_id, int | str) or not str(job_id).isdigit():
        return "", (), f"job_id {str(job_id)[:40]!r} is not a job id"
    hostlist = item.get("nodes_resume", item.get("nodes"))
    try:
        names = tuple(expand(hostlist)) if isinstance(hostlist, str) else ()
    except HostlistError:
        names = ()
    if not names:
        return "", (), f"nodes {str(hostlist)[:60]!r} is not a Slurm hostlist"
    strangers = [n for n in names if nodes is not None and n not in nodes]
    if strangers:
        return "", (), f"nodes {compress(strangers)[:60]} are not in the hook's node list"
    return str(job_id), names, ""


def _to_stderr(message: str) -> None:
    from clustermgr.core.logsafe import say  # only when there is a warning: a hook's budget

    say(f"clustermgr: warning: {message}", err=True)


def record(
    kind: str,
    hostlist: str,
    config_path: Path,
    resume_file: str | None = None,
) -> HookRequest:
    """Validate, write the spool file, poke the daemon. Raises UsageError on foreign names."""
    if kind not in HOOK_KINDS:
        raise UsageError(f"unknown hook kind {kind!r}")
    try:
        nodes = expand(hostlist)
    except HostlistError as exc:
        raise UsageError(f"{hostlist!r} is not a Slurm hostlist: {exc}") from None
    if not nodes:
        raise UsageError("no node names given")
    config = raw_hook_config(config_path)
    foreign = [n for n in nodes if n not in config.owners]
    if foreign:
        raise UsageError(f"not cloud nodes of any template: {compress(foreign)} (nothing recorded)")
    jobs: dict[str, tuple[str, ...]] = {}
    if resume_file:
        try:
            with Path(resume_file).open("rb") as handle:
                raw = handle.read(RESUME_FILE_MAX + 1)
        except OSError as exc:
            _to_stderr(f"SLURM_RESUME_FILE {resume_file}: {exc.strerror}: jobs not grouped")
        else:
            if len(raw) > RESUME_FILE_MAX:
                _to_stderr(f"SLURM_RESUME_FILE over {RESUME_FILE_MAX} bytes: jobs not grouped")
            else:
                jobs = parse_resume_file(raw.decode("utf-8", "replace"), set(nodes))
    request = HookRequest(kind=kind, nodes=tuple(nodes), jobs=jobs, at=time.time())
    if kind == "resume" and daemon_is_stale(config):
        power_down_now(config, nodes, DAEMON_DOWN_REASON)
        return request
    path = write_request(config.state_dir / SPOOL, request)
    poke(config.state_dir / SOCKET)
    return HookRequest(request.kind, request.nodes, request.jobs, request.at, path)


DAEMON_DOWN_REASON = str(Reason(DAEMON, "cm-scale not running"))
HEARTBEAT_FILE = "heartbeat.json"


def daemon_is_stale(config: HookConfig) -> bool:
    try:
        age = time.time() - (config.state_dir / HEARTBEAT_FILE).stat().st_mtime
    except OSError:
        return True
    return age > config.heartbeat_stale_s


def power_down_now(config: HookConfig, nodes: Sequence[str], reason: str) -> None:
    """Nobody will launch these: hand them back to Slurm at once (jobs requeue)."""
    import subprocess

    from clustermgr.workload.base import reason_arg

    argv = [
        str(config.slurm_bin / "scontrol"),
        "update",
        f"nodename={compress(nodes)}",
        "state=POWER_DOWN_FORCE",
        reason_arg(reason),
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkloadError(f"cm-scale is not running and scontrol failed: {exc}") from None
    if done.returncode != 0:
        raise WorkloadError(
            f"cm-scale is not running and `scontrol update` failed: {done.stderr.strip()[:200]}"
        )


def write_request(spool: Path, request: HookRequest) -> Path:
    stem = f"{request.at:.6f}-{os.getpid()}-{request.kind}"
    final = spool / f"{stem}.json"
    partial = spool / f".{stem}.tmp"
    payload = {
        "kind": request.kind,
        "nodes": list(request.nodes),
        "jobs": {job: list(nodes) for job, nodes in request.jobs.items()},
        "at": request.at,
    }
    try:
        with open(partial, "w") as handle:
            json.dump(payload, handle)
        os.replace(partial, final)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the request into {spool}: {exc.strerror} "
            "(cm-scale creates it; is it running, and is [daemon] state_dir the same?)"
        ) from None
    return final


def poke(socket_path: Path) -> None:
    """Wake the daemon early; harmless when it is not listening."""
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
    except OSError:
        return
    try:
        sock.setblocking(False)
        sock.sendto(b"wake", str(socket_path))
    except OSError:
        pass
    finally:
        sock.close()


REQUEST_KINDS = frozenset({"resume", "suspend", "resume-fail"})
REJECTED_SUFFIX = ".rejected"
# a request lists its nodes (and its jobs' nodes) expanded: a 5,000-node resume is ~70 KB
# without jobs (bench/bench_burst.py), ~140 KB with them; 1 MiB holds some 35,000 nodes
MAX_REQUEST_BYTES = 1024 * 1024
ROOT_ONLY: frozenset[int] = frozenset({0})


def read_requests(spool: Path, writers: Collection[int] = ROOT_ONLY) -> list[HookRequest]:
    """Every well-formed request file in the spool written by one of `writers` (uids: root
    and SlurmUser), oldest first; anything else is left for `reject_malformed`."""
    found: list[HookRequest] = []
    for path in _entries(spool):
        request, _problem, _owner = _read_request(path, writers)
        if request is not None:
            found.append(request)
    return found


def reject_malformed(spool: Path, writers: Collection[int] = ROOT_ONLY) -> list[str]:
    """Move aside every spool entry that is not a hook's request (wrong type, owner, size,
    links or content): one line each saying which, what is wrong, whose it is and where it
    went. Once moved it no longer ends in .json, so it is never read or reported again."""
    lines = []
    for path in _entries(spool):
        request, problem, owner = _read_request(path, writers)
        if request is not None or problem is None:
            continue
        aside = path.with_name(path.name + REJECTED_SUFFIX)
        try:
            os.replace(path, aside)
        except OSError as exc:
            lines.append(f"spool: {path}: {problem}; {owner}; cannot move it aside: {exc.strerror}")
            continue
        lines.append(f"spool: {path.name}: {problem}; {owner}; moved aside to {aside.name}")
    return lines


def _entries(spool: Path) -> list[Path]:
    try:
        return sorted(p for p in spool.iterdir() if p.suffix == ".json")
    except FileNotFoundError:
        return []


def _owner(uid: int) -> str:
    import pwd

    try:
        return f"owner {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"owner uid {uid} (no such account)"


def _read_request(
    path: Path, writers: Collection[int]
) -> tuple[HookRequest | None, str | None, str]:
    """The request, or what is wrong with the entry, and whose it is (None for both: it
    vanished). Opened without following a link or waiting on a FIFO, judged by fstat."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None, ""
    except OSError as exc:
        try:
            owner = _owner(path.lstat().st_uid)
        except OSError:
            return None, None, ""
        if exc.errno == errno.ELOOP:
            return None, "a symbolic link, not a request", owner
        return None, f"cannot be opened: {exc.strerror}", owner
    owner = "owner unknown"
    try:
        info = os.fstat(fd)
        owner = _owner(info.st_uid)
        problem = _refusal(info, writers)
        if problem is not None:
            return None, problem, owner
        raw = os.read(fd, MAX_REQUEST_BYTES + 1)
    except OSError as exc:
        return None, f"unreadable: {exc.strerror}", owner
    finally:
        os.close(fd)
    request, problem = _parse_request(raw, path)
    return request, problem, owner


def _refusal(info: os.stat_result, writers: Collection[int]) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return f"not a regular file ({stat.filemode(info.st_mode)[0]}-type)"
    if info.st_uid not in writers:
        return "written by neither root nor SlurmUser"
    if info.st_nlink != 1:
        return f"has {info.st_nlink} hard links (a hook's request has one)"
    if info.st_size > MAX_REQUEST_BYTES:
        return f"{info.st_size} bytes, over the {MAX_REQUEST_BYTES}-byte limit of a request"
    return None


def _parse_request(raw: bytes, path: Path) -> tuple[HookRequest | None, str | None]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"not JSON: {str(exc).splitlines()[0][:120]}"
    try:
        kind = str(data["kind"])
        if kind not in REQUEST_KINDS:
            return None, f"unknown kind {kind[:40]!r}"
        nodes = data["nodes"]
        if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
            return None, "'nodes' is not a list of node names"
        jobs = {str(j): tuple(str(n) for n in ns) for j, ns in dict(data.get("jobs", {})).items()}
        return HookRequest(kind, tuple(nodes), jobs, float(data["at"]), path), None
    except KeyError as exc:
        return None, f"missing key {exc}"
    except (TypeError, ValueError, AttributeError):
        return None, "fields of the wrong type"


def spool_writers(slurm_user: str) -> frozenset[int]:
    """Root and SlurmUser: the only owners a request is accepted from."""
    import pwd

    try:
        return frozenset({0, pwd.getpwnam(slurm_user).pw_uid})
    except KeyError:
        return ROOT_ONLY


def consume(requests: Iterable[HookRequest]) -> None:
    for request in requests:
        if request.path is not None:
            request.path.unlink(missing_ok=True)


def summarize(requests: Sequence[HookRequest]) -> str:
    kinds: dict[str, list[str]] = {}
    for request in requests:
        kinds.setdefault(request.kind, []).extend(request.nodes)
    return "; ".join(f"{kind} {compress(nodes)}" for kind, nodes in sorted(kinds.items()))

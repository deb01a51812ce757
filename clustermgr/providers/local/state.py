"""The local provider's "cloud API state": instances.json and faults.json in its state dir.

Both files are read and written under an exclusive `fcntl.flock` on `<state_dir>/.lock`
(one launch at a time, across processes) and replaced atomically (write a temporary file,
fsync, rename), so a crash never leaves half a file.

faults.json (optional) makes the provider fail the way a cloud does, for tests and demos:

    {"launch":   {"kind": "QUOTA", "remaining": 3, "code": "QuotaExceeded", "message": "..."},
     "capacity": 2,
     "stall":    {"at": "launch", "seconds": 30, "remaining": 1}}

`launch`: the next `remaining` launch() calls that would start something fail with a
LaunchError of `kind` (CAPACITY, QUOTA, THROTTLED, TRANSIENT, OTHER) and start nothing.
`capacity`: only this many more instances can start; past it, CAPACITY (a partial launch).
`stall`: the next `remaining` times the provider passes `at`, it waits `seconds` there, as a
slow cloud API would (crash tests kill the caller in that window): "launch" is after an
instance's namespace and slurmd exist and before its record says it runs; "terminate" is
after the records say stopping and before anything is stopped.
Each use is consumed (and saved before the wait); the file disappears when nothing is left.

An instance's record is written before its namespace is made (status "starting"), and says
"running" once its slurmd is started: a launch that dies in between leaves a record that the
next launch or terminate (which hold the lock, so no launch of theirs is in progress) finds
and cleans up (provider.py, `sweep`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.local.errors import auth_error

INSTANCES_FILE = "instances.json"
FAULTS_FILE = "faults.json"
LOCK_FILE = ".lock"
FAULT_KINDS = {"CAPACITY", "QUOTA", "THROTTLED", "TRANSIENT", "OTHER"}
STALL_POINTS = {"launch", "terminate"}
DEFAULT_FAULT_CODES = {
    "CAPACITY": "InsufficientCapacity",
    "QUOTA": "QuotaExceeded",
    "THROTTLED": "RequestLimitExceeded",
    "TRANSIENT": "ServiceUnavailable",
    "OTHER": "InternalError",
}


@dataclass
class InstanceRecord:
    instance_id: str
    cluster: str
    node: str
    request_id: str
    template: str
    instance_type: str
    address: str
    launched_at: str  # ISO 8601, UTC
    pid: int | None = None  # the unshare session leader; slurmd is its child
    pid_start: int | None = None  # its start time in clock ticks (pid reuse guard)
    # "starting" (written before the namespace is made; a launch that died left it),
    # "running", or "stopping" (terminate began, cleanup pending)
    status: str = "running"
    log: str = ""
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InstanceRecord:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True)
class LaunchFault:
    kind: ErrorKind
    code: str
    message: str


def write_atomic(path: Path, data: object) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ProviderError(
            ErrorKind.OTHER,
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); fix or remove the file",
            provider="local",
            code="BadStateFile",
        ) from None
    if not isinstance(data, dict):
        raise ProviderError(
            ErrorKind.OTHER,
            f"{path}: expected a JSON object",
            provider="local",
            code="BadStateFile",
        )
    return data


class State:
    """The instances of one state dir, loaded under the lock; `save()` writes them back."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        data = _read_json(directory / INSTANCES_FILE)
        self.instances: dict[str, InstanceRecord] = {
            rec["instance_id"]: InstanceRecord.from_json(rec)
            for rec in data.get("instances", [])
            if isinstance(rec, dict) and "instance_id" in rec
        }
        self._faults = _read_json(directory / FAULTS_FILE)
        self._faults_changed = False

    def save(self) -> None:
        records = [asdict(r) for r in sorted(self.instances.values(), key=lambda r: r.instance_id)]
        write_atomic(self.directory / INSTANCES_FILE, {"version": 1, "instances": records})
        if self._faults_changed:
            path = self.directory / FAULTS_FILE
            if self._faults:
                write_atomic(path, self._faults)
            else:
                path.unlink(missing_ok=True)
            self._faults_changed = False

    # --- faults -------------------------------------------------------------------------

    def take_launch_fault(self) -> LaunchFault | None:
        """Consume one injected launch failure, if any is left."""
        spec = self._faults.get("launch")
        if not isinstance(spec, dict):
            return None
        kind = str(spec.get("kind", "CAPACITY")).upper()
        remaining = int(spec.get("remaining", 1))
        if kind not in FAULT_KINDS or remaining <= 0:
            self._faults.pop("launch", None)
            self._faults_changed = True
            return None
        if remaining == 1:
            self._faults.pop("launch")
        else:
            spec["remaining"] = remaining - 1
        self._faults_changed = True
        return LaunchFault(
            ErrorKind(kind),
            str(spec.get("code") or DEFAULT_FAULT_CODES[kind]),
            str(spec.get("message") or f"injected {kind} fault (faults.json)"),
        )

    def take_stall(self, at: str) -> float:
        """Seconds to wait at `at` (consumes one use; 0.0 when no stall is injected there)."""
        spec = self._faults.get("stall")
        if not isinstance(spec, dict) or spec.get("at") != at:
            return 0.0
        remaining = int(spec.get("remaining", 1))
        if remaining <= 1:
            self._faults.pop("stall")
        else:
            spec["remaining"] = remaining - 1
        self._faults_changed = True
        return max(0.0, float(spec.get("seconds", 0.0))) if remaining > 0 else 0.0

    def take_capacity(self) -> bool:
        """True when one more instance may start (consumes it); False past the limit."""
        if "capacity" not in self._faults:
            return True
        left = int(self._faults["capacity"])
        if left <= 0:
            return False
        self._faults["capacity"] = left - 1
        self._faults_changed = True
        return True


def check_state_dir(directory: Path) -> None:
    """Create the dir if missing; AUTH when it is not ours to use (the local provider's
    credentials are the right to use its state dir)."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = directory.stat()
    except OSError as exc:
        raise auth_error(f"state dir {directory}: {exc.strerror}") from None
    if info.st_uid != os.geteuid():
        raise auth_error(
            f"state dir {directory} belongs to uid {info.st_uid}, not to this user "
            f"(uid {os.geteuid()}): it holds someone else's instances"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise auth_error(f"state dir {directory} is not writable")


@contextlib.contextmanager
def locked(directory: Path, exclusive: bool = True) -> Iterator[State]:
    """The state of `directory` under its flock (exclusive to change it)."""
    check_state_dir(directory)
    with open(directory / LOCK_FILE, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield State(directory)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def inject_launch_fault(directory: Path, kind: ErrorKind, attempts: int = 1) -> None:
    """Tests: the next `attempts` launches fail with `kind` (writes faults.json)."""
    _update_faults(directory, "launch", {"kind": kind.value, "remaining": attempts})


def limit_capacity(directory: Path, instances: int) -> None:
    """Tests: from now on only `instances` more instances can start (writes faults.json)."""
    _update_faults(directory, "capacity", instances)


def inject_stall(directory: Path, at: str, seconds: float, times: int = 1) -> None:
    """Tests: the next `times` passes through `at` ("launch" or "terminate") wait `seconds`."""
    if at not in STALL_POINTS:
        raise ValueError(f"stall point {at!r}: expected one of {sorted(STALL_POINTS)}")
    _update_faults(directory, "stall", {"at": at, "seconds": seconds, "remaining": times})


def clear_faults(directory: Path) -> None:
    """Tests: no injected fault is left (removes faults.json)."""
    with locked(directory):
        (directory / FAULTS_FILE).unlink(missing_ok=True)


def _update_faults(directory: Path, key: str, value: object) -> None:
    with locked(directory):
        path = directory / FAULTS_FILE
        faults = _read_json(path)
        faults[key] = value
        write_atomic(path, faults)

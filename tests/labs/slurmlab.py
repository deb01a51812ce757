"""A real Slurm controller on this machine, for tests, the demo and benchmarks.

`SlurmLab` writes a small slurm.conf (and gres.conf) into a work directory, makes sure
munged runs, starts `slurmctld -D` as its own child and waits until `scontrol ping` says
UP. Clients reach it through `lab.env` (SLURM_CONF=...). Everything it starts it stops,
by pid: slurmctld always; munged, if a test process started it, by the last test process
to let go of it (pytest-xdist runs several).

Facts this relies on (see REAL-COMPONENTS.md): `PrivateData=cloud` or powered-down CLOUD
nodes are invisible; configless slurmd (`SlurmctldParameters=enable_configless`) fetches
slurm.conf and gres.conf from the controller; slurmd rejects GPUs that are not character
devices, so fake GPUs are `mknod c 1 3` files named by gres.conf `File=` lines.

    groups = [NodeGroup("cloud[1-4]", gpus=2)]
    with SlurmLab(tmp, groups, [Partition("cloud", "cloud[1-4]")]) as lab:
        lab.run("sinfo", "--json")
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from clustermgr.core.hostlists import expand

SBIN = Path("/usr/sbin")
MUNGE_SOCKET_DIR = Path("/run/munge")
MUNGE_PID_FILE = MUNGE_SOCKET_DIR / "munged.pid"
STOP_TIMEOUT_S = 10.0
CLIENT_PATH = "/usr/bin:/usr/sbin:/bin:/sbin"


class SlurmLabError(RuntimeError):
    """The lab could not start, or a Slurm client it ran failed."""


@dataclass(frozen=True)
class NodeGroup:
    """One NodeName= line."""

    names: str  # hostlist, e.g. "cloud[1-4]" or "gpu-a100-[001-004]"
    cpus: int = 2
    memory_mb: int = 1000
    gpus: int = 0  # fake GPUs: char devices made with mknod, gres.conf File= lines
    gpu_model: str | None = None
    features: tuple[str, ...] = ()
    cloud: bool = True  # State=CLOUD (else a plain on-prem node line, State=UNKNOWN)
    weight: int = 1
    address: str | None = None  # NodeAddr=; on-prem names that do not resolve need one

    def node_line(self) -> str:
        words = [
            f"NodeName={self.names}",
            *([f"NodeAddr={self.address}"] if self.address else []),
            f"CPUs={self.cpus}",
            f"RealMemory={self.memory_mb}",
            f"Weight={self.weight}",
            f"State={'CLOUD' if self.cloud else 'UNKNOWN'}",
        ]
        if self.gpus:
            model = f"{self.gpu_model}:" if self.gpu_model else ""
            words.append(f"Gres=gpu:{model}{self.gpus}")
        if self.features:
            words.append(f"Feature={','.join(self.features)}")
        return " ".join(words)


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: str  # hostlist
    default: bool = False

    def line(self) -> str:
        default = "YES" if self.default else "NO"
        return (
            f"PartitionName={self.name} Nodes={self.nodes} Default={default} "
            "MaxTime=INFINITE State=UP"
        )


# --- munge: one munged per machine, shared by every lab of every test process ----------
# pytest-xdist runs labs in several processes at once: each process using munged leaves a
# file named by its pid in MUNGE_USERS_DIR, and munged started by a test process (its pid in
# MUNGE_STARTED) is stopped by whichever process is the last to let go, under a file lock.

_munge_lock = threading.Lock()
_munge_users = 0  # this process's labs holding munged
MUNGE_USERS_DIR = Path("/run/cm-tests-munge")
MUNGE_STARTED = MUNGE_USERS_DIR / "started"


@contextlib.contextmanager
def _machine_munge_lock() -> Iterator[None]:
    MUNGE_USERS_DIR.mkdir(parents=True, exist_ok=True)
    with open(MUNGE_USERS_DIR / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _munge_started_by_tests() -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(MUNGE_STARTED.read_text().strip())
    return None


def munge_works() -> bool:
    """`munge -n | unmunge` succeeds."""
    try:
        token = subprocess.run(
            ["munge", "-n"], capture_output=True, text=True, timeout=10, check=False
        )
        if token.returncode != 0:
            return False
        done = subprocess.run(
            ["unmunge"], input=token.stdout, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _acquire_munge(timeout: float) -> None:
    global _munge_users
    with _munge_lock, _machine_munge_lock():
        _munge_users += 1
        (MUNGE_USERS_DIR / str(os.getpid())).touch()
        if munge_works():
            return
        try:
            # a munged that lives but is slow to answer is waited for: a second `munged
            # --force` would take its socket from under every lab that uses it
            if _running_munged() is not None and _answers_within(min(timeout, 15)):
                return
            _start_munged(timeout)
        except BaseException:
            _munge_users -= 1
            if not _munge_users:
                (MUNGE_USERS_DIR / str(os.getpid())).unlink(missing_ok=True)
            raise


def _start_munged(timeout: float) -> None:
    MUNGE_SOCKET_DIR.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(KeyError):
        os.chown(MUNGE_SOCKET_DIR, pwd.getpwnam("munge").pw_uid, grp.getgrnam("munge").gr_gid)
    munged = shutil.which("munged", path=f"{SBIN}:/usr/bin") or str(SBIN / "munged")
    # munged forks into the background and writes its pid file; --force survives a stale
    # socket. Its output goes to a file, not a pipe the daemon could hold open.
    with tempfile.TemporaryFile("w+") as out:
        done = subprocess.run(
            [munged, "--force"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        out.seek(0)
        if done.returncode != 0:
            raise SlurmLabError(f"munged --force failed ({done.returncode}): {out.read().strip()}")
    _wait(munge_works, timeout, "munged did not answer (munge -n | unmunge)")
    with contextlib.suppress(OSError, ValueError):
        MUNGE_STARTED.write_text(str(int(MUNGE_PID_FILE.read_text().strip())))


def _release_munge() -> None:
    """Let go of munged; the last test process to do so stops it if a test started it."""
    global _munge_users
    with _munge_lock, _machine_munge_lock():
        _munge_users = max(0, _munge_users - 1)
        if _munge_users:
            return
        (MUNGE_USERS_DIR / str(os.getpid())).unlink(missing_ok=True)
        for marker in MUNGE_USERS_DIR.iterdir():
            if marker.name.isdigit():
                if pid_alive(int(marker.name)):
                    return  # another test process still uses it
                marker.unlink(missing_ok=True)  # a process that died holding it
        started = _munge_started_by_tests()
        if started is not None:
            if _comm(started) == "munged":  # pid_max is 32768 here: a stale pid is reused soon
                stop_pid(started, STOP_TIMEOUT_S)
            MUNGE_STARTED.unlink(missing_ok=True)


def _answers_within(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if munge_works():
            return True
        time.sleep(0.2)
    return False


def _running_munged() -> int | None:
    """The pid of the munged this machine runs (its pid file), if that process lives."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(MUNGE_PID_FILE.read_text().strip())
        if _comm(pid) == "munged":
            return pid
    return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# --- processes ------------------------------------------------------------------------


def pid_alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie (a zombie child is reaped here)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def stop_pid(pid: int, timeout: float, group: bool = False) -> None:
    """SIGTERM, then SIGKILL after `timeout`; already gone is fine."""
    send = os.killpg if group else os.kill
    for sig, wait_s in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            send(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.05)
        if not pid_alive(pid):
            break
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise SlurmLabError(f"{what} within {timeout:.0f} s")


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (slurmctld binds 0.0.0.0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        port: int = sock.getsockname()[1]
        return port


def make_fake_gpus(directory: Path, count: int) -> list[Path]:
    """`count` character devices (1:3, like /dev/null) that slurmd accepts as GPUs."""
    directory.mkdir(parents=True, exist_ok=True)
    made = []
    for index in range(count):
        path = directory / f"fakegpu{index}"
        if not (path.exists() and stat.S_ISCHR(path.stat().st_mode)):
            path.unlink(missing_ok=True)
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        made.append(path)
    return made


class SlurmLab:
    """A slurmctld of its own (unique ClusterName and port), state in `workdir`."""

    def __init__(
        self,
        workdir: Path,
        groups: Sequence[NodeGroup],
        partitions: Sequence[Partition],
        *,
        slurm_user: str = "root",
        controller_address: str = "127.0.0.1",
        resume_program: str | None = None,
        suspend_program: str | None = None,
        resume_fail_program: str | None = None,
        suspend_time: int = 60,
        resume_timeout: int = 120,
        suspend_timeout: int = 30,
        extra_conf: Sequence[str] = (),
        launcher: Sequence[str] = (),
    ) -> None:
        self.workdir = Path(workdir).resolve()
        # argv that runs slurmctld's argv after it (exec, so its pid is slurmctld's): a
        # head whose users come from its LDAP (tests/labs/directorlab.py, head_launcher)
        self.launcher = tuple(launcher)
        self.groups = tuple(groups)
        self.partitions = tuple(partitions)
        self.slurm_user = slurm_user
        self.controller_address = controller_address
        self.resume_program = resume_program
        self.suspend_program = suspend_program
        self.resume_fail_program = resume_fail_program
        self.suspend_time = suspend_time
        self.resume_timeout = resume_timeout
        self.suspend_timeout = suspend_timeout
        self.extra_conf = tuple(extra_conf)
        self.cluster_name = f"lab{secrets.token_hex(3)}"
        self.port = free_port()
        self.conf_path = self.workdir / "slurm.conf"
        self.gres_path = self.workdir / "gres.conf"
        self.state_dir = self.workdir / "state"
        self.spool_dir = self.workdir / "spool"
        self.log_dir = self.workdir / "log"
        self.gpu_dir = self.workdir / "gpus"
        self.ctld_log = self.log_dir / "slurmctld.log"
        self.env: dict[str, str] = {"SLURM_CONF": str(self.conf_path)}
        self.pid: int | None = None
        self.started_munge = False
        self._munge_held = False
        self._process: subprocess.Popen[bytes] | None = None

    # --- names --------------------------------------------------------------------------

    @property
    def conf_server(self) -> str:
        """`HOST:PORT` for `slurmd --conf-server` (configless burst nodes)."""
        return f"{self.controller_address}:{self.port}"

    @property
    def node_names(self) -> list[str]:
        return [name for group in self.groups for name in expand(group.names)]

    @property
    def cloud_node_names(self) -> list[str]:
        return [name for group in self.groups if group.cloud for name in expand(group.names)]

    # --- configuration ------------------------------------------------------------------

    def _power_save_lines(self) -> list[str]:
        resume = self.resume_program
        if resume is None and not any(g.cloud for g in self.groups):
            return []
        lines = [
            f"ResumeProgram={resume or '/bin/true'}",
            f"SuspendProgram={self.suspend_program or '/bin/true'}",
            f"SuspendTime={self.suspend_time}",
            f"ResumeTimeout={self.resume_timeout}",
            f"SuspendTimeout={self.suspend_timeout}",
        ]
        if self.resume_fail_program:
            lines.append(f"ResumeFailProgram={self.resume_fail_program}")
        return lines

    def slurm_conf_text(self) -> str:
        host = socket.gethostname().split(".")[0]
        w = self.workdir
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={host}({self.controller_address})",
            f"SlurmctldPort={self.port}",
            f"SlurmUser={self.slurm_user}",
            "AuthType=auth/munge",
            "SlurmctldParameters=enable_configless",
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "TreeWidth=65533",
            "PrivateData=cloud",
            "MpiDefault=none",
            "MessageTimeout=10",
            f"StateSaveLocation={self.state_dir}",
            f"SlurmdSpoolDir={self.spool_dir}/%n",
            f"SlurmctldPidFile={w}/slurmctld.pid",
            f"SlurmdPidFile={w}/run/slurmd.%n.pid",
            f"SlurmctldLogFile={self.ctld_log}",
            f"SlurmdLogFile={self.log_dir}/slurmd.%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        if any(g.gpus for g in self.groups):
            lines.append("GresTypes=gpu")
        lines += self._power_save_lines()
        lines += list(self.extra_conf)
        lines += [g.node_line() for g in self.groups]
        lines += [p.line() for p in self.partitions]
        return "\n".join(lines) + "\n"

    def gres_conf_text(self) -> str:
        lines = []
        for index, group in enumerate(self.groups):
            if not group.gpus:
                continue
            devices = make_fake_gpus(self.gpu_dir / f"group{index}", group.gpus)
            files = f"{devices[0].parent}/fakegpu[0-{group.gpus - 1}]"
            if group.gpus == 1:
                files = str(devices[0])
            model = f" Type={group.gpu_model}" if group.gpu_model else ""
            lines.append(f"NodeName={group.names} Name=gpu{model} File={files}")
        return "\n".join(lines) + "\n"

    def write_config(self) -> None:
        for path in (self.workdir, self.state_dir, self.spool_dir, self.log_dir):
            path.mkdir(parents=True, exist_ok=True)
        (self.workdir / "run").mkdir(exist_ok=True)
        self.workdir.chmod(0o755)
        self.gres_path.write_text(self.gres_conf_text())
        self.conf_path.write_text(self.slurm_conf_text())
        if self.slurm_user != "root":
            self._hand_over_to_slurm_user()

    def _hand_over_to_slurm_user(self) -> None:
        try:
            user = pwd.getpwnam(self.slurm_user)
        except KeyError:
            raise SlurmLabError(f"SlurmUser {self.slurm_user!r} does not exist") from None
        for path in (self.state_dir, self.log_dir, self.workdir / "run"):
            os.chown(path, user.pw_uid, user.pw_gid)
        for parent in self.workdir.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                raise SlurmLabError(
                    f"{parent} is not traversable by others (mode "
                    f"{stat.filemode(parent.stat().st_mode)}): SlurmUser {self.slurm_user} "
                    "cannot reach the lab; use a work directory under a 0755 path"
                )
        for program in (self.resume_program, self.suspend_program, self.resume_fail_program):
            if program:
                _check_runnable_by_others(Path(program), self.slurm_user)

    # --- life cycle ---------------------------------------------------------------------

    def start(self, timeout: float = 30) -> None:
        if self.pid is not None:
            return
        self.write_config()
        _acquire_munge(timeout)
        self._munge_held = True
        self.started_munge = _munge_started_by_tests() is not None
        try:
            self._start_slurmctld(timeout)
        except BaseException:
            self.stop()
            raise

    def _start_slurmctld(self, timeout: float) -> None:
        slurmctld = shutil.which("slurmctld", path=f"{SBIN}:/usr/bin") or str(SBIN / "slurmctld")
        out = (self.log_dir / "slurmctld.stdout").open("ab")
        try:
            self._process = subprocess.Popen(
                [*self.launcher, slurmctld, "-D", "-i", "-f", str(self.conf_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **self.env, "PATH": CLIENT_PATH},
            )
        finally:
            out.close()
        self.pid = self._process.pid

        def up() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise SlurmLabError(
                    f"slurmctld exited ({self._process.returncode}): {self.log_tail()}"
                )
            done = self.run("scontrol", "ping", check=False, timeout=5)
            return " is UP" in done.stdout

        _wait(up, timeout, f"slurmctld did not answer scontrol ping; log: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        text = ""
        for path in (self.ctld_log, self.log_dir / "slurmctld.stdout"):
            with contextlib.suppress(OSError):
                text += path.read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self) -> None:
        """Stop slurmctld (its process group: slurmscriptd too); release munged. Idempotent."""
        if self._process is not None:
            if self._process.poll() is None:
                stop_pid(self._process.pid, STOP_TIMEOUT_S, group=True)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)  # stray slurmscriptd
            self._process = None
        self.pid = None
        if self._munge_held:
            self._munge_held = False
            _release_munge()

    def __enter__(self) -> SlurmLab:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- clients ------------------------------------------------------------------------

    def run(
        self, *argv: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (`sinfo`, `scontrol`, ...) against this lab."""
        env = {**os.environ, **self.env}
        env.setdefault("PATH", CLIENT_PATH)
        try:
            done = subprocess.run(
                list(argv), capture_output=True, text=True, env=env, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise SlurmLabError(f"{' '.join(argv)} timed out after {timeout:.0f} s") from None
        if check and done.returncode != 0:
            raise SlurmLabError(
                f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}; "
                f"{self.controller_state()}"
            )
        return done

    def controller_state(self) -> str:
        """What became of this lab's slurmctld and munged: for a client failure's message,
        so a controller that died, was signalled or lost munge says so in the report."""
        process = self._process
        if process is None:
            ctld = "slurmctld not started by this lab"
        elif process.poll() is None:
            ctld = f"slurmctld {process.pid} running"
        else:
            code = process.returncode
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
            ctld = f"slurmctld {process.pid} exited with {how}"
        munge = "munge works" if munge_works() else "munge does NOT work"
        return f"{ctld}; {munge}; slurmctld log: {self.log_tail(10)}"

    def node_fields(self, node: str) -> dict[str, str]:
        """`scontrol show node NODE -o` as a dict (values with spaces are cut at the space)."""
        out = self.run("scontrol", "show", "node", node, "-o").stdout
        fields: dict[str, str] = {}
        for word in out.split():
            key, sep, value = word.partition("=")
            if sep:
                fields[key] = value
        return fields

    def node_states(self) -> dict[str, str]:
        """Node name -> sinfo's compact state (`idle~`, `alloc`, `mix#`, ...)."""
        out = self.run("sinfo", "-N", "-h", "-o", "%N %t").stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def wait_for(
        self, condition: Callable[[], bool], timeout: float = 60, what: str = "condition"
    ) -> None:
        _wait(condition, timeout, f"{what} not reached")


def _check_runnable_by_others(program: Path, user: str) -> None:
    """slurmctld runs hooks as SlurmUser: the program and its directories must allow it."""
    try:
        info = program.stat()
    except OSError:
        raise SlurmLabError(f"hook program {program} does not exist") from None
    owner_is_user = pwd.getpwuid(info.st_uid).pw_name == user if info.st_uid else False
    needed = stat.S_IXUSR | stat.S_IRUSR if owner_is_user else stat.S_IXOTH | stat.S_IROTH
    if info.st_mode & needed != needed:
        raise SlurmLabError(
            f"hook program {program} is not readable and executable by SlurmUser {user} "
            f"(mode {stat.filemode(info.st_mode)}): chmod a+rx it"
        )
    for parent in program.resolve().parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise SlurmLabError(
                f"{parent} is not traversable by SlurmUser {user}, so hook {program} cannot run"
            )

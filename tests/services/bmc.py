"""Real BMC emulators for the on-prem power tests, each on a free loopback port, with its
own throwaway directory, started and stopped by pid.

  * `IpmiSim`: `ipmi_sim` from Debian's openipmi package, one per node (one BMC, one
    chassis), IPMI-over-LAN on a UDP port, one admin user. Its chassis power commands go
    to `chassis_control` (see ipmi_lan(5)), here CHASSIS_HOOK: a small program that keeps
    the chassis power in a file and appends every command ipmi_sim gives it to an events
    file, so a test sees "power on" really reach the chassis. A soft-off (ACPI shutdown)
    is obeyed after `os_shutdown_s` like an OS would, or ignored (a hung OS) when
    `soft_off` is "ignore".
  * `SushyEmulator`: `sushy-emulator --fake` from sushy-tools, a Redfish service whose fake
    systems driver keeps each system's power state, with HTTP basic authentication (a
    bcrypt htpasswd file) and its external notifier pointed at a `Notifier` that records
    every power change the emulator makes. The fake driver applies a power change after a
    random 1-11 s "hardware" delay (it adds randint(1, 11) s to the current whole second);
    the emulator is started with that number pinned (`delay_s`: 1 by default, so a change
    takes up to 1 s; 2 makes it take 1 to 2 s, long enough for a graceful shutdown to be
    cut short by a hard off), so the tests are deterministic and quick. Besides that, only
    its log level is set (INFO, so its log names each ResetType it carried out); nothing
    else of the emulator is changed.

`hang()` stops an emulator with SIGSTOP (a BMC that takes the request and never answers),
`resume()` continues it; `stop()` ends it (SIGCONT, SIGTERM, SIGKILL after a timeout).
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IPMI_SIM = "/usr/bin/ipmi_sim"
IPMITOOL = "/usr/bin/ipmitool"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0

CHASSIS_HOOK = '''#!{python} -I
"""ipmi_sim chassis_control hook: HOOK DIR get power | set power 0/1 | set shutdown 1 ..."""
import pathlib, sys, time

state = pathlib.Path(sys.argv[1])
op, params = sys.argv[2], sys.argv[3:]
power, due = state / "power", state / "shutdown_at"


def event(text):
    with open(state / "events", "a") as out:
        out.write(f"{{time.time():.3f}} {{text}}\\n")


def current():
    if due.exists() and time.time() >= float(due.read_text()):
        due.unlink()
        power.write_text("0")
        event("os-shutdown-done")
    return power.read_text().strip() if power.exists() else "0"


if op == "get":
    for name in params:
        print(f"{{name}}:" + (current() if name == "power" else "default"))
elif op == "set":
    for name, value in zip(params[0::2], params[1::2]):
        if name == "power":
            due.unlink(missing_ok=True)
            power.write_text(value)
            event("power-on" if value == "1" else "hard-off")
        elif name == "shutdown" and value == "1":
            event("soft-off")
            mode = (state / "soft_off").read_text().strip()
            if mode != "ignore" and current() == "1":
                due.write_text(str(time.time() + float(mode)))
else:
    sys.exit(1)
'''

LAN_CONF = """name "{name}"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "{hook} {state}"
  user 2 true "{user}" "{password}" admin 10 none md2 md5 straight
"""

EMU_COMMANDS = """mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02
sel_enable 0x20 1000 0x0a
mc_enable 0x20
"""

SUSHY_BOOT = (
    "import logging, random, sys\n"
    "random.randint = lambda low, high: {delay_s}  # the fake driver's hardware delay\n"
    "logging.getLogger('sushy_tools.emulator.main').setLevel(logging.INFO)  # log resets\n"
    "from sushy_tools.emulator.main import main\n"
    "sys.exit(main())\n"
)


class EmulatorUnavailable(Exception):
    """The emulator cannot run here; the message says what is missing."""


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Emulator:
    """A started emulator process (stopped by pid)."""

    process: subprocess.Popen[bytes]
    workdir: Path
    port: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def hang(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)

    def log_text(self) -> str:
        with contextlib.suppress(OSError):
            return (self.workdir / "emulator.log").read_text(errors="replace")
        return ""


def _spawn(argv: Sequence[str], workdir: Path, env: dict[str, str] | None = None) -> Any:
    log = (workdir / "emulator.log").open("ab")
    try:
        return subprocess.Popen(
            list(argv),
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    finally:
        log.close()


# --------------------------------------------------------------------------- ipmi_sim


@dataclass
class IpmiSim(Emulator):
    user: str = ""
    state: Path = field(default_factory=Path)

    @property
    def power(self) -> str:
        """What the chassis is, as the hook keeps it: "on" or "off"."""
        path = self.state / "power"
        return "on" if path.exists() and path.read_text().strip() == "1" else "off"

    def press_power_button(self) -> None:
        """Power the chassis on out of band (an admin at the machine)."""
        (self.state / "power").write_text("1")

    def events(self) -> list[str]:
        """The chassis commands ipmi_sim gave the hook, oldest first (without times)."""
        with contextlib.suppress(FileNotFoundError):
            lines = (self.state / "events").read_text().splitlines()
            return [line.split(" ", 1)[1] for line in lines]
        return []

    def os_ignores_soft_off(self) -> None:
        (self.state / "soft_off").write_text("ignore")


def ipmi_sim_missing() -> str | None:
    for path, package in ((IPMI_SIM, "openipmi"), (IPMITOOL, "ipmitool")):
        if not os.access(path, os.X_OK):
            return f"{path} not found (install Debian's {package}: .ci/install-debs)"
    return None


def start_ipmi_sim(workdir: Path, user: str, password: str, os_shutdown_s: float = 0.3) -> IpmiSim:
    missing = ipmi_sim_missing()
    if missing:
        raise EmulatorUnavailable(missing)
    workdir.mkdir(parents=True)
    state = workdir / "chassis"
    state.mkdir()
    (state / "power").write_text("0")
    (state / "soft_off").write_text(str(os_shutdown_s))
    hook = workdir / "chassis-control"
    hook.write_text(CHASSIS_HOOK.format(python=sys.executable))
    hook.chmod(0o755)
    port = free_udp_port()
    lan = LAN_CONF.format(
        name=f"bmc{port}", port=port, hook=hook, state=state, user=user, password=password
    )
    (workdir / "lan.conf").write_text(lan)
    (workdir / "lan.conf").chmod(0o600)
    (workdir / "bmc.emu").write_text(EMU_COMMANDS)
    (workdir / "persist").mkdir()
    argv = [IPMI_SIM, "-c", "lan.conf", "-f", "bmc.emu", "-s", str(workdir / "persist"), "-n"]
    sim = IpmiSim(_spawn(argv, workdir), workdir, port, user, state)
    try:
        _wait_ipmi_ready(sim, password)
    except BaseException:
        sim.stop()
        raise
    return sim


def _wait_ipmi_ready(sim: IpmiSim, password: str) -> None:
    argv = [IPMITOOL, "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", str(sim.port)]
    argv += ["-U", sim.user, "-E", "-N", "1", "-R", "0", "chassis", "power", "status"]
    env = {"IPMI_PASSWORD": password, "PATH": "/usr/bin:/bin"}
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if sim.process.poll() is not None:
            raise EmulatorUnavailable(f"ipmi_sim exited: {sim.log_text()[-500:]}")
        done = subprocess.run(argv, env=env, capture_output=True, timeout=10, check=False)
        if done.returncode == 0:
            return
        time.sleep(0.1)
    raise EmulatorUnavailable(f"ipmi_sim did not answer: {sim.log_text()[-500:]}")


# --------------------------------------------------------------------------- sushy-emulator


@dataclass(frozen=True)
class PowerChange:
    at: float
    system: str
    power_state: str
    pending: str | None  # the power state the emulator is moving to, if any


class Notifier:
    """Receives the emulator's external notifications (a PUT of the system per change)."""

    def __init__(self) -> None:
        self.changes: list[PowerChange] = []
        self._lock = threading.Lock()
        notifier = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"] or 0)))
                pending = (body.get("pending_power") or {}).get("power_state")
                change = PowerChange(time.time(), body["name"], body["power_state"], pending)
                with notifier._lock:
                    notifier.changes.append(change)
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def of(self, system: str) -> list[PowerChange]:
        with self._lock:
            return [c for c in self.changes if c.system == system]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@dataclass
class SushyEmulator(Emulator):
    systems: dict[str, str] = field(default_factory=dict)  # name -> uuid
    auth: tuple[str, str] = ("", "")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _request(self, path: str, data: dict[str, Any] | None = None) -> Any:
        token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
        request = urllib.request.Request(  # noqa: S310 - the emulator's loopback URL
            self.url + path,
            data=None if data is None else json.dumps(data).encode(),
            method="GET" if data is None else "POST",
            headers={"Content-Type": "application/json", "Authorization": f"Basic {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            body = answer.read()
        return json.loads(body) if body else None

    def power(self, name: str) -> str:
        """The system's power state as the emulator reports it ("On", "Off")."""
        answer = self._request(f"/redfish/v1/Systems/{self.systems[name]}")
        return str(answer["PowerState"])

    def press_power_button(self, name: str) -> None:
        """Power a system on out of band, and wait until the emulator reports it on."""
        path = f"/redfish/v1/Systems/{self.systems[name]}/Actions/ComputerSystem.Reset"
        self._request(path, {"ResetType": "On"})
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.power(name) != "On" and time.monotonic() < deadline:
            time.sleep(0.1)

    def resets(self, name: str) -> list[str]:
        """The ResetTypes the emulator carried out on a system, in order, from its log."""
        pattern = re.compile(rf'System "{self.systems[name]}" power state set to "(\w+)"')
        return pattern.findall(self.log_text())


def sushy_missing() -> str | None:
    try:
        import bcrypt  # noqa: F401
        import sushy_tools  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[all,test]')"
    return None


def start_sushy(
    workdir: Path,
    systems: Sequence[str],
    user: str,
    password: str,
    notifier: Notifier,
    delay_s: int = 1,
) -> SushyEmulator:
    missing = sushy_missing()
    if missing:
        raise EmulatorUnavailable(missing)
    import bcrypt

    workdir.mkdir(parents=True)
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    (workdir / "htpasswd").write_text(f"{user}:{digest}\n")
    port = free_tcp_port()
    uuids = {name: f"5ee0c0de-0000-4000-8000-{index:012d}" for index, name in enumerate(systems)}
    fake = [
        {"uuid": uuid, "name": name, "power_state": "Off", "external_notifier": True, "nics": []}
        for name, uuid in uuids.items()
    ]
    config = {
        "SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1",
        "SUSHY_EMULATOR_LISTEN_PORT": port,
        "SUSHY_EMULATOR_AUTH_FILE": str(workdir / "htpasswd"),
        "SUSHY_EMULATOR_STATE_DIR": str(workdir / "state"),
        "SUSHY_EMULATOR_FAKE_DRIVER": True,
        "SUSHY_EMULATOR_FAKE_SYSTEMS": fake,
        "EXTERNAL_NOTIFICATION_URL": notifier.url,
    }
    text = "".join(f"{key} = {value!r}\n" for key, value in config.items())
    (workdir / "emulator.conf").write_text(text)
    boot = SUSHY_BOOT.format(delay_s=int(delay_s))
    argv = [sys.executable, "-c", boot, "--config", str(workdir / "emulator.conf")]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"}
    emulator = SushyEmulator(
        _spawn([*argv, "--fake"], workdir, env), workdir, port, uuids, (user, password)
    )
    try:
        _wait_http_ready(emulator)
    except BaseException:
        emulator.stop()
        raise
    return emulator


def _wait_http_ready(emulator: SushyEmulator) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if emulator.process.poll() is not None:
            raise EmulatorUnavailable(f"sushy-emulator exited: {emulator.log_text()[-500:]}")
        root = emulator.url + "/redfish/v1/"
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(root, timeout=2),  # noqa: S310 - the emulator's loopback URL
        ):
            return
        time.sleep(0.05)
    raise EmulatorUnavailable(f"sushy-emulator did not answer: {emulator.log_text()[-500:]}")

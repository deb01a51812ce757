"""The `ipmi` provider: chassis power over IPMI-over-LAN (lanplus) with `ipmitool`.

Why ipmitool and not pyghmi: pyghmi 1.6.19 (the current release) hung for good, in our
tests against ipmi_sim, when a process opened a second session to a BMC with the same
user (its class-wide session cache waits on a login that never comes), and its timeouts
are fixed inside the library (about 5 s per BMC that does not answer). ipmitool runs as
a child process with an argv list (never a shell), so every call has a hard deadline
(`bmc_timeout_s`, after which the child is killed) and a hung BMC cannot hang cm-scale.

The password goes to ipmitool in its environment (`-E` reads IPMI_PASSWORD), never on
the command line, where any user could read it with `ps`; the child gets a minimal
environment of its own. `-v` makes ipmitool name why a session failed.

ipmitool has no error codes (exit status 1 for every failure), so `DIAGNOSTICS` is the one
place clustermgr reads message text: ipmitool's fixed diagnostic lines (its lanplus
interface's RAKP and session messages, checked against ipmi_sim by
tests/integration/test_bmc_providers.py), mapped to a kind and a code of ours. What
matches none of them is OTHER with ipmitool's first line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import TYPE_CHECKING, ClassVar

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.core.secret import Secret
from clustermgr.providers.bmc.client import Driver
from clustermgr.providers.bmc.errors import BmcError, unreachable
from clustermgr.providers.bmc.kind import IpmiOptions
from clustermgr.providers.bmc.provider import PowerProvider
from clustermgr.providers.bmc.shapes import UNREACHABLE, BmcNode, Power
from clustermgr.providers.skeleton import Check, Failure, first_line

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

SEARCH_PATH = "/usr/bin:/usr/sbin:/bin:/sbin:/usr/local/bin"
CHILD_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
POWER_LINE = re.compile(r"^Chassis Power is (on|off)\s*$", re.MULTILINE)

# (what ipmitool prints, kind, our code, what it means), first match wins.
DIAGNOSTICS: tuple[tuple[str, ErrorKind, str, str], ...] = (
    ("rakp 2 hmac is invalid", ErrorKind.AUTH, "BmcPasswordRejected", "password rejected"),
    ("unauthorized name", ErrorKind.AUTH, "BmcUserRejected", "user name rejected"),
    (
        "unauthorized role or privilege level",
        ErrorKind.AUTH,
        "BmcPrivilegeRejected",
        "privilege level rejected (ipmi_privilege)",
    ),
    (
        "invalid authentication algorithm",
        ErrorKind.INVALID,
        "BmcCipherSuite",
        "the BMC does not offer this cipher suite (ipmi_cipher_suite)",
    ),
    (
        "invalid integrity algorithm",
        ErrorKind.INVALID,
        "BmcCipherSuite",
        "the BMC does not offer this cipher suite (ipmi_cipher_suite)",
    ),
    (
        "invalid confidentiality algorithm",
        ErrorKind.INVALID,
        "BmcCipherSuite",
        "the BMC does not offer this cipher suite (ipmi_cipher_suite)",
    ),
    (
        "insufficient resources to create",
        ErrorKind.THROTTLED,
        "BmcBusy",
        "the BMC has no free session",
    ),
    ("get auth capabilities error", ErrorKind.TRANSIENT, UNREACHABLE, "the BMC did not answer"),
    ("no response from remote controller", ErrorKind.TRANSIENT, UNREACHABLE, "no answer"),
    (
        "unable to establish ipmi v2 / rmcp+ session",
        ErrorKind.TRANSIENT,
        UNREACHABLE,
        "no IPMI session could be opened",
    ),
)
NOISE = ("loading iana pen registry", "running get vso", "discovered ipmb", "invalid completion")


def classify(output: str, node: BmcNode) -> Failure:
    """ipmitool's failure output -> Failure (DIAGNOSTICS; see the module docstring)."""
    lowered = output.lower()
    for needle, kind, code, meaning in DIAGNOSTICS:
        if needle in lowered:
            return Failure(kind, code, f"{node.describe()}: {meaning}")
    for line in output.splitlines():
        text = line.strip()
        if not text or text.lower().startswith(NOISE):
            continue
        if "chassis power control" in text.lower():
            return Failure(ErrorKind.OTHER, "PowerControlRefused", f"{node.describe()}: {text}")
        return Failure(ErrorKind.OTHER, "IpmitoolFailed", f"{node.describe()}: {first_line(text)}")
    return Failure(ErrorKind.OTHER, "IpmitoolFailed", f"{node.describe()}: no output")


def ipmitool_path() -> str | None:
    return shutil.which("ipmitool", path=f"{os.environ.get('PATH', '')}:{SEARCH_PATH}")


class Ipmitool:
    """`ipmitool -I lanplus` against one BMC per call, with a hard deadline."""

    def __init__(self, settings: ProviderSettings) -> None:
        options = settings.options_as(IpmiOptions)
        self.timeout_s = options.bmc_timeout_s
        self.cipher_suite = options.ipmi_cipher_suite
        self.privilege = options.ipmi_privilege

    def argv(self, tool: str, node: BmcNode, command: tuple[str, ...]) -> list[str]:
        # ipmitool's own retransmissions (-N seconds apart, -R retries) end within the
        # deadline on a BMC that does not answer; the deadline kills it otherwise.
        per_try = max(1, int(self.timeout_s / 2))
        return [
            tool,
            "-I",
            "lanplus",
            "-H",
            node.address,
            "-p",
            str(node.port),
            "-U",
            node.username,
            "-E",
            "-C",
            str(self.cipher_suite),
            "-L",
            self.privilege,
            "-N",
            str(per_try),
            "-R",
            "1",
            "-v",
            *command,
        ]

    def run(self, node: BmcNode, password: Secret, *command: str) -> str:
        tool = ipmitool_path()
        if tool is None:
            raise BmcError(
                Failure(
                    ErrorKind.OTHER,
                    "IpmitoolMissing",
                    "ipmitool is not installed (Debian: apt-get install ipmitool)",
                )
            )
        env = {"IPMI_PASSWORD": password.reveal(), "PATH": CHILD_PATH, "LC_ALL": "C"}
        try:
            done = subprocess.run(
                self.argv(tool, node, command),
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise unreachable(node, self.timeout_s) from None
        except OSError as exc:
            raise BmcError(
                Failure(ErrorKind.OTHER, "IpmitoolFailed", f"cannot run {tool}: {exc.strerror}")
            ) from None
        if done.returncode != 0:
            failure = classify(f"{done.stderr}\n{done.stdout}", node)
            if failure.code == UNREACHABLE:
                raise unreachable(node, self.timeout_s)
            raise BmcError(failure)
        return done.stdout

    # --- the Driver -----------------------------------------------------------------------

    def status(self, node: BmcNode, password: Secret) -> Power:
        answer = self.run(node, password, "chassis", "power", "status")
        found = POWER_LINE.search(answer)
        if found is None:
            return Power.UNKNOWN
        return Power.ON if found.group(1) == "on" else Power.OFF

    def power_on(self, node: BmcNode, password: Secret) -> None:
        self.run(node, password, "chassis", "power", "on")

    def soft_off(self, node: BmcNode, password: Secret) -> bool:
        self.run(node, password, "chassis", "power", "soft")
        return True

    def hard_off(self, node: BmcNode, password: Secret) -> None:
        self.run(node, password, "chassis", "power", "off")


class IpmiProvider(PowerProvider):
    kind: ClassVar[str] = "ipmi"

    def make_driver(self, settings: ProviderSettings) -> Driver:
        return Ipmitool(settings)

    def protocol_checks(self) -> list[Check]:
        return [("ipmitool", self.check_ipmitool)]

    def check_ipmitool(self) -> str:
        tool = ipmitool_path()
        if tool is None:
            raise ProviderError(
                ErrorKind.OTHER,
                "ipmitool is not installed (Debian: apt-get install ipmitool)",
                provider=self.name,
                code="IpmitoolMissing",
            )
        done = subprocess.run([tool, "-V"], capture_output=True, text=True, timeout=10, check=False)
        return f"{tool}: {first_line(done.stdout or done.stderr) or 'version unknown'}"

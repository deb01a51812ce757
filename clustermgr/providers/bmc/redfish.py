"""The `redfish` provider: ComputerSystem power through sushy (OpenStack's Redfish client,
the one Ironic drives BMCs with).

Why sushy and not DMTF's `redfish` package: sushy gives typed resources (PowerState,
ResetType, the system's allowed reset values) and typed errors with the HTTP status
(AccessError for 401/403, ResourceNotFoundError, ServerSideError, ConnectionError), so
errors are classified by class and status, never by text; and it is what the emulator we
test against (sushy-tools) is built to serve.

Each call builds a client with HTTP basic authentication (no Redfish session is created,
so none is left behind on a BMC, whose session slots are few), connect and read timeouts
of `bmc_timeout_s`, and one attempt (sushy's own retries would multiply the timeout).
TLS: `tls_ca_file` (a CA bundle) or `tls_verify` (default true); `redfish_scheme = "http"`
only for emulators and labs. A node's `system` is the ComputerSystem id
(`/redfish/v1/Systems/<system>`) or a full path; without one, the BMC's only system.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import TYPE_CHECKING, ClassVar

import requests
import sushy
from sushy import auth as sushy_auth
from sushy import exceptions as sushy_errors

from clustermgr.core.errors import ErrorKind
from clustermgr.core.secret import Secret
from clustermgr.providers.bmc.client import Driver
from clustermgr.providers.bmc.errors import BmcError, unreachable
from clustermgr.providers.bmc.kind import RedfishOptions
from clustermgr.providers.bmc.provider import PowerProvider
from clustermgr.providers.bmc.shapes import UNREACHABLE, BmcNode, Power
from clustermgr.providers.skeleton import Check, Failure, first_line

if TYPE_CHECKING:
    from clustermgr.config import ProviderSettings

SYSTEMS_PATH = "/redfish/v1/Systems/"
THROTTLED_STATUS = 429
POWER = {
    sushy.PowerState.ON: Power.ON,
    sushy.PowerState.OFF: Power.OFF,
    sushy.PowerState.POWERING_ON: Power.POWERING_ON,
    sushy.PowerState.POWERING_OFF: Power.POWERING_OFF,
}


def classify(exc: sushy_errors.SushyError, node: BmcNode, timeout_s: float) -> Failure:
    """A sushy error -> Failure, by its class and HTTP status (never its text)."""
    where = node.describe()
    if isinstance(exc, sushy_errors.ConnectionError):
        if isinstance(exc.__context__, requests.exceptions.SSLError):
            why = "TLS verification failed (tls_ca_file, tls_verify)"
            return Failure(ErrorKind.INVALID, "BmcTlsRejected", f"{where}: {why}")
        return unreachable(node, timeout_s).failure
    if isinstance(exc, sushy_errors.HTTPError):
        status = exc.status_code or 0
        code = f"HTTP{status}"
        if isinstance(exc, sushy_errors.AccessError):
            return Failure(ErrorKind.AUTH, code, f"{where}: user or password rejected", status)
        if isinstance(exc, sushy_errors.ResourceNotFoundError):
            why = "no such ComputerSystem (bmc_nodes system)"
            return Failure(ErrorKind.INVALID, "SystemNotFound", f"{where}: {why}", status)
        if isinstance(exc, sushy_errors.ServerSideError):
            return Failure(ErrorKind.TRANSIENT, code, f"{where}: BMC error {status}", status)
        kind = ErrorKind.THROTTLED if status == THROTTLED_STATUS else ErrorKind.OTHER
        return Failure(kind, code, f"{where}: HTTP {status}: {first_line(str(exc))}", status)
    if isinstance(exc, sushy_errors.UnknownDefaultError):
        why = "the BMC has several ComputerSystems: set system in bmc_nodes"
        return Failure(ErrorKind.INVALID, "SystemAmbiguous", f"{where}: {why}")
    return Failure(ErrorKind.OTHER, type(exc).__name__, f"{where}: {first_line(str(exc))}")


class Sushy:
    """One sushy client per call, against one BMC."""

    def __init__(self, settings: ProviderSettings) -> None:
        options = settings.options_as(RedfishOptions)
        self.timeout_s = options.bmc_timeout_s
        self.scheme = options.redfish_scheme
        self.verify: bool | str = (
            str(options.tls_ca_file) if options.tls_ca_file else options.tls_verify
        )

    def system(self, node: BmcNode, password: Secret) -> sushy.resources.system.system.System:
        root = sushy.Sushy(
            f"{self.scheme}://{node.endpoint}",
            auth=sushy_auth.BasicAuth(node.username, password.reveal()),
            verify=self.verify,
            server_side_retries=1,
            server_side_retries_delay=0,
            read_timeout=self.timeout_s,
            connect_timeout=self.timeout_s,
        )
        if node.system is None:
            return root.get_system()
        path = node.system if node.system.startswith("/") else SYSTEMS_PATH + node.system
        return root.get_system(path)

    def call(self, node: BmcNode, password: Secret, action: str) -> Power | bool:
        try:
            return self._do(node, password, action)
        except sushy_errors.SushyError as exc:
            failure = classify(exc, node, self.timeout_s)
            if failure.code == UNREACHABLE:
                raise unreachable(node, self.timeout_s) from None
            raise BmcError(failure) from None
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            # an answer sushy could not read (not JSON, not a Redfish resource): the class
            # name only, since the text may quote the answer
            why = f"unreadable answer from the BMC ({type(exc).__name__})"
            raise BmcError(
                Failure(ErrorKind.OTHER, "BadAnswer", f"{node.describe()}: {why}")
            ) from None

    def _do(self, node: BmcNode, password: Secret, action: str) -> Power | bool:
        system = self.system(node, password)
        if action == "status":
            return POWER.get(system.power_state, Power.UNKNOWN)
        allowed = system.get_allowed_reset_system_values()
        wanted = {
            "on": sushy.ResetType.ON,
            "soft": sushy.ResetType.GRACEFUL_SHUTDOWN,
            "hard": sushy.ResetType.FORCE_OFF,
        }[action]
        if wanted not in allowed:
            if action == "soft":
                return False
            why = f"the BMC does not allow ResetType {wanted.value}"
            raise BmcError(Failure(ErrorKind.OTHER, "ResetNotAllowed", f"{node.describe()}: {why}"))
        system.reset_system(wanted)
        return True

    # --- the Driver -----------------------------------------------------------------------

    def status(self, node: BmcNode, password: Secret) -> Power:
        power = self.call(node, password, "status")
        assert isinstance(power, Power)
        return power

    def power_on(self, node: BmcNode, password: Secret) -> None:
        self.call(node, password, "on")

    def soft_off(self, node: BmcNode, password: Secret) -> bool:
        return bool(self.call(node, password, "soft"))

    def hard_off(self, node: BmcNode, password: Secret) -> None:
        self.call(node, password, "hard")


class RedfishProvider(PowerProvider):
    kind: ClassVar[str] = "redfish"

    def make_driver(self, settings: ProviderSettings) -> Driver:
        return Sushy(settings)

    def protocol_checks(self) -> list[Check]:
        return [("sushy", lambda: f"sushy {version('sushy')}")]

"""The on-prem power providers against real BMC emulators (no Slurm): `ipmi` (ipmitool)
against ipmi_sim from Debian's openipmi, one per node, and `redfish` (sushy) against
`sushy-emulator --fake`; both started and stopped by pid per test (tests/services/bmc.py).

The emulators' power actions are observed from their side: ipmi_sim's chassis-control
hook records every chassis command, the Redfish emulator logs every ResetType it carries
out. A recognisable fake password (and a wrong one) must never appear in an exception,
a check line or a log record.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from clustermgr.config import ProviderSettings, load_settings, parse_settings
from clustermgr.core.errors import ConfigError, ErrorKind, ProviderError
from clustermgr.providers.base import (
    TAG_CLUSTER,
    TAG_NODE,
    TAG_REQUEST,
    TAG_TEMPLATE,
    InstanceState,
    LaunchSpec,
    Provider,
)
from clustermgr.providers.bmc.client import read_password
from clustermgr.providers.bmc.ipmi import Ipmitool
from clustermgr.providers.bmc.shapes import bmc_nodes
from clustermgr.providers.registry import make_provider
from tests.conftest import EXAMPLE_CONFIG, cannot_run
from tests.services import bmc

pytestmark = pytest.mark.integration

CLUSTER = "onprem-test"
NODES = ("n-001", "n-002", "n-003")
LONE = "n-003"  # the node whose BMC serves it alone (hung or stopped in some tests)
USER = "cmadmin"
PASSWORD = "Bmc-Pass-7f3a9c51"  # recognisable: it must never show up in text
WRONG = "Wrong-Pass-e1d2c3b4"
TIMEOUT_S = 1.0  # bmc_timeout_s of the providers under test
BOUND_S = TIMEOUT_S + 1.5  # what one call to a BMC that does not answer may take at most
REDFISH_ACTIONS = {"On": "on", "GracefulShutdown": "soft-off", "ForceOff": "hard-off"}
IPMI_ACTIONS = {"power-on": "on", "soft-off": "soft-off", "hard-off": "hard-off"}


def wait_until(check: Callable[[], bool], timeout_s: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def spec(nodes: tuple[str, ...] | list[str], **overrides: Any) -> LaunchSpec:
    fields: dict[str, Any] = {
        "template": "onprem-gpu",
        "instance_types": ("onprem",),
        "image": "-",
        "node_names": tuple(nodes),
        **overrides,
    }
    return LaunchSpec(**fields)


def states(provider: Provider) -> dict[str, InstanceState]:
    return {iid: inst.state for iid, inst in provider.list_instances().items()}


@dataclass
class Lab:
    """The emulated BMCs of NODES, and providers pointed at them."""

    kind: str
    tmp: Path
    entries: list[dict[str, Any]]
    extra: dict[str, Any]
    stoppers: list[Callable[[], None]] = field(default_factory=list)

    def secret_file(self, name: str, secret: str) -> Path:
        path = self.tmp / name
        path.write_text(secret + "\n")
        path.chmod(0o600)
        return path

    def settings(self, password: str = PASSWORD, **overrides: Any) -> ProviderSettings:
        credentials = overrides.pop("credentials", None) or {
            "source": "password_file",
            "username": USER,
            "secret_file": str(self.secret_file(f"{self.kind}-{len(password)}.pw", password)),
        }
        data: dict[str, Any] = {
            "name": f"{self.kind}-test",
            "type": self.kind,
            "region": "lab",
            "credentials": credentials,
            "bmc_nodes": self.entries,
            "bmc_timeout_s": TIMEOUT_S,
            "polling_interval_s": 0.1,
            "soft_off_timeout_s": 5,
            "hard_off_timeout_s": 5,
            **self.extra,
            **overrides,
        }
        return ProviderSettings.model_validate(data)

    def provider(self, **overrides: Any) -> Provider:
        return make_provider(self.settings(**overrides), CLUSTER)

    # --- the emulators' side (overridden per protocol) -------------------------------------

    def power(self, node: str) -> str:
        raise NotImplementedError

    def actions(self, node: str) -> list[str]:
        """Power actions the BMC carried out on the node: "on", "soft-off", "hard-off"."""
        raise NotImplementedError

    def press_power_button(self, node: str) -> None:
        raise NotImplementedError

    def hang(self, node: str) -> None:
        raise NotImplementedError

    def kill(self, node: str) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        for stop in reversed(self.stoppers):
            stop()


@dataclass
class IpmiLab(Lab):
    sims: dict[str, bmc.IpmiSim] = field(default_factory=dict)

    def power(self, node: str) -> str:
        return self.sims[node].power

    def actions(self, node: str) -> list[str]:
        return [IPMI_ACTIONS[e] for e in self.sims[node].events() if e in IPMI_ACTIONS]

    def press_power_button(self, node: str) -> None:
        self.sims[node].press_power_button()

    def os_ignores_soft_off(self, node: str) -> None:
        self.sims[node].os_ignores_soft_off()

    def hang(self, node: str) -> None:
        self.sims[node].hang()

    def kill(self, node: str) -> None:
        self.sims[node].stop()


@dataclass
class RedfishLab(Lab):
    emulators: dict[str, bmc.SushyEmulator] = field(default_factory=dict)  # node -> its BMC

    def power(self, node: str) -> str:
        return self.emulators[node].power(node).lower()

    def actions(self, node: str) -> list[str]:
        return [REDFISH_ACTIONS[r] for r in self.emulators[node].resets(node)]

    def press_power_button(self, node: str) -> None:
        self.emulators[node].press_power_button(node)

    def hang(self, node: str) -> None:
        self.emulators[node].hang()

    def kill(self, node: str) -> None:
        self.emulators[node].stop()


def ipmi_lab(tmp: Path, slow: bool) -> IpmiLab:
    lab = IpmiLab("ipmi", tmp, [], {"ipmi_cipher_suite": 3})  # ipmi_sim offers suite 3
    try:
        for node in NODES:
            sim = bmc.start_ipmi_sim(tmp / f"bmc-{node}", USER, PASSWORD)
            lab.stoppers.append(sim.stop)
            lab.sims[node] = sim
            lab.entries.append({"nodes": node, "address": "127.0.0.1", "port": sim.port})
    except BaseException:
        lab.stop()
        raise
    return lab


def redfish_lab(tmp: Path, slow: bool) -> RedfishLab:
    """Two emulators, started side by side: one serves n-001 and n-002, one n-003. `slow`:
    each power change takes 1 to 2 s (a graceful shutdown can be cut short)."""
    notifier = bmc.Notifier()
    lab = RedfishLab("redfish", tmp, [], {"redfish_scheme": "http"})
    lab.stoppers.append(notifier.close)
    delay_s = 2 if slow else 1
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(bmc.start_sushy, tmp / name, nodes, USER, PASSWORD, notifier, delay_s)
            for name, nodes in (("bmc-a", NODES[:2]), ("bmc-b", [LONE]))
        ]
    started: list[bmc.SushyEmulator] = []
    failed: list[BaseException] = []
    for future in futures:
        try:
            started.append(future.result())
        except BaseException as exc:
            failed.append(exc)
            continue
        lab.stoppers.append(started[-1].stop)
    if failed:
        lab.stop()
        raise failed[0]
    shared, lone = started
    lab.emulators = {NODES[0]: shared, NODES[1]: shared, LONE: lone}
    # one BMC serving two systems named by node, one serving a system named by its id
    lab.entries += [
        {"nodes": "n-[001-002]", "address": "127.0.0.1", "port": shared.port, "system": "{node}"},
        {"nodes": LONE, "address": "127.0.0.1", "port": lone.port, "system": lone.systems[LONE]},
    ]
    return lab


@contextlib.contextmanager
def running_lab(kind: str, tmp: Path, slow: bool = False) -> Iterator[Lab]:
    start = ipmi_lab if kind == "ipmi" else redfish_lab
    try:
        made: Lab = start(tmp, slow)
    except bmc.EmulatorUnavailable as exc:
        cannot_run(f"{kind} BMC emulator: {exc}")
        raise
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture(params=["ipmi", "redfish"])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lab]:
    with running_lab(request.param, tmp_path) as made:
        yield made


@pytest.fixture(params=["ipmi", "redfish"])
def slow_lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lab]:
    """A lab whose Redfish power changes take 1 to 2 s (ipmi_sim: as `lab`)."""
    with running_lab(request.param, tmp_path, slow=True) as made:
        yield made


def no_secret_in(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text
        assert WRONG not in text


# --------------------------------------------------------------------------- power round trip


def test_power_on_status_and_graceful_off_round_trip(
    lab: Lab, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = lab.provider()
    checks = provider.check()
    tool = "ipmitool" if lab.kind == "ipmi" else "sushy"
    assert [c.name for c in checks] == ["credentials", tool, "BMCs"]
    assert all(c.ok for c in checks), checks
    assert checks[-1].detail == "3 BMCs answer (3 off)"
    assert [t.name for t in provider.catalog()] == ["onprem"]
    assert states(provider) == dict.fromkeys(NODES, InstanceState.TERMINATED)

    result = provider.launch(spec(["n-001", "n-002"]), 2, "req-on-1")
    assert result.ok, result.errors
    assert [i.instance_id for i in result.instances] == ["n-001", "n-002"]
    for instance in result.instances:
        assert instance.state is InstanceState.PENDING  # power on accepted
        assert instance.node_name == instance.instance_id == instance.tags[TAG_NODE]
        assert instance.tags[TAG_REQUEST] == "req-on-1"
        assert instance.tags[TAG_TEMPLATE] == "onprem-gpu"
        assert instance.tags[TAG_CLUSTER] == CLUSTER
    wait_until(lambda: lab.power("n-001") == lab.power("n-002") == "on", what="power on")
    assert lab.actions("n-001") == lab.actions("n-002") == ["on"]
    wait_until(
        lambda: (
            states(provider)
            == {
                "n-001": InstanceState.RUNNING,
                "n-002": InstanceState.RUNNING,
                LONE: InstanceState.TERMINATED,
            }
        ),
        what="the provider to list both nodes on",
    )

    provider.terminate(["n-001", "n-002", "not-managed"], "req-off-1")
    assert lab.power("n-001") == lab.power("n-002") == "off"
    assert lab.actions("n-001") == lab.actions("n-002") == ["on", "soft-off"]  # no hard off
    assert states(provider) == dict.fromkeys(NODES, InstanceState.TERMINATED)
    provider.terminate(["n-001"], "req-off-2")  # already off: nothing to do
    assert lab.actions("n-001") == ["on", "soft-off"]
    assert "not in bmc_nodes, ignored: not-managed" in caplog.text
    no_secret_in(caplog.text)


def test_launch_is_idempotent_and_an_on_node_is_just_returned(lab: Lab) -> None:
    provider = lab.provider()
    first = provider.launch(spec(["n-001"]), 1, "req-idem-1")
    assert first.ok
    wait_until(lambda: states(provider)["n-001"] is InstanceState.RUNNING, what="n-001 on")

    again = provider.launch(spec(["n-001"]), 1, "req-idem-1")
    other = provider.launch(spec(["n-001"]), 1, "req-idem-2")
    assert [i.instance_id for i in again.instances] == ["n-001"]
    assert again.instances[0].state is InstanceState.RUNNING
    assert other.instances[0].tags[TAG_REQUEST] == "req-idem-2"
    assert lab.actions("n-001") == ["on"]  # one power on for three launches

    lab.press_power_button("n-002")  # switched on by hand, outside clustermgr
    before = lab.actions("n-002")
    on_already = provider.launch(spec(["n-002"]), 1, "req-idem-3")
    assert on_already.ok and on_already.instances[0].state is InstanceState.RUNNING
    assert lab.actions("n-002") == before


def test_hard_off_follows_a_graceful_shutdown_that_does_not_finish(slow_lab: Lab) -> None:
    lab = slow_lab
    if isinstance(lab, IpmiLab):
        lab.os_ignores_soft_off("n-001")  # a hung OS: the soft-off does nothing
        soft_s = 0.6
    else:
        soft_s = 0.3  # the emulator takes at least 1 s to apply GracefulShutdown
    provider = lab.provider(soft_off_timeout_s=soft_s)
    provider.launch(spec(["n-001", "n-002"]), 2, "req-hard-1")
    wait_until(lambda: lab.power("n-001") == lab.power("n-002") == "on", what="power on")

    hard_only = lab.provider(soft_off_timeout_s=0)  # 0: no graceful shutdown at all
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        graceful_first = pool.submit(provider.terminate, ["n-001"], "req-hard-2")
        hard_at_once = pool.submit(hard_only.terminate, ["n-002"], "req-hard-3")
        graceful_first.result()
        hard_at_once.result()
    assert time.monotonic() - started >= soft_s
    assert lab.actions("n-001") == ["on", "soft-off", "hard-off"]
    assert lab.actions("n-002") == ["on", "hard-off"]
    assert lab.power("n-001") == lab.power("n-002") == "off"
    assert states(provider) == dict.fromkeys(NODES, InstanceState.TERMINATED)


# --------------------------------------------------------------------------- unanswering BMCs


def dead_bmc(lab: Lab, how: str) -> Provider:
    """A provider whose LONE node is on and whose BMC then stops answering."""
    provider = lab.provider()
    provider.launch(spec([LONE]), 1, "req-unknown-0")
    wait_until(lambda: lab.power(LONE) == "on", what=f"{LONE} on")
    lab.hang(LONE) if how == "hung" else lab.kill(LONE)
    return provider


@pytest.mark.parametrize("how", ["hung", "stopped"])
def test_a_bmc_that_does_not_answer_is_unknown_never_off(
    lab: Lab, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    provider = dead_bmc(lab, how)
    started = time.monotonic()
    listed = states(provider)
    assert time.monotonic() - started < BOUND_S
    assert listed == {
        "n-001": InstanceState.TERMINATED,
        "n-002": InstanceState.TERMINATED,
        LONE: InstanceState.UNKNOWN,
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and LONE in warnings[0] and "did not answer" in warnings[0]
    no_secret_in(caplog.text)


def test_a_bmc_that_does_not_answer_fails_its_launch_terminate_and_check(
    lab: Lab, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = dead_bmc(lab, "hung")
    started = time.monotonic()
    partial = provider.launch(spec(["n-001", LONE]), 2, "req-unknown-1")
    assert time.monotonic() - started < BOUND_S
    assert [i.instance_id for i in partial.instances] == ["n-001"]
    assert partial.missing == 1
    (error,) = partial.errors
    assert error.kind is ErrorKind.CAPACITY and error.code == "BmcUnreachable"
    assert LONE in error.message and "\n" not in error.reason()

    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        provider.terminate([LONE], "req-unknown-2")
    assert time.monotonic() - started < BOUND_S
    assert caught.value.kind is ErrorKind.TRANSIENT
    message = str(caught.value)
    assert "\n" not in message and LONE in message and "did not answer" in message

    checks = {c.name: c for c in provider.check()}
    assert not checks["BMCs"].ok and LONE in checks["BMCs"].detail
    assert "\n" not in checks["BMCs"].detail
    no_secret_in(message, caplog.text, *(c.detail for c in checks.values()))


# --------------------------------------------------------------------------- credentials


def test_wrong_credentials_are_auth_naming_the_source_never_the_secret(
    lab: Lab, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("CM_TEST_BMC_PASSWORD", WRONG)
    sources = {
        str(lab.secret_file("wrong.pw", WRONG)): "password_file",
        "CM_TEST_BMC_PASSWORD": "password_env",
    }
    texts = []
    for where, source in sources.items():
        key = "secret_file" if source == "password_file" else "secret_env"
        provider = lab.provider(credentials={"source": source, "username": USER, key: where})
        calls: list[Callable[[], object]] = [
            provider.list_instances,
            functools.partial(provider.launch, spec(["n-001", "n-002"]), 2, "req-auth-1"),
            functools.partial(provider.terminate, ["n-001"], "req-auth-2"),
        ]
        for call in calls:
            with pytest.raises(ProviderError) as caught:
                call()
            assert caught.value.kind is ErrorKind.AUTH
            message = str(caught.value)
            assert "\n" not in message and where in message and USER in message
            texts.append(message)
        checks = {c.name: c for c in provider.check()}
        assert checks["credentials"].ok  # readable...
        assert not checks["BMCs"].ok and where in checks["BMCs"].detail  # ...but rejected
        texts += [c.detail for c in checks.values()]
    assert lab.actions("n-001") == lab.actions("n-002") == []  # nothing was powered on
    no_secret_in(*texts, caplog.text)


def test_a_bad_spec_or_an_unreadable_password_is_refused_before_any_bmc_call(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = lab.provider()
    cases = [
        (spec(["n-001"], instance_types=("gpu-xl",)), "instance_types"),
        (spec(["n-009"]), "node_names"),
        (spec(["n-001"], market="spot"), "market"),
    ]
    for bad, field_name in cases:
        with pytest.raises(ProviderError) as caught:
            provider.launch(bad, 1, "req-invalid-1")
        assert caught.value.kind is ErrorKind.INVALID
        assert "onprem-gpu" in str(caught.value) and field_name in str(caught.value)
    with pytest.raises(ProviderError, match="node_names"):
        provider.launch(spec(["n-001"]), 2, "req-invalid-2")  # two nodes, one name

    monkeypatch.delenv("CM_TEST_BMC_UNSET", raising=False)
    unreadable = {
        str(lab.tmp / "no-such.pw"): ("password_file", "SecretUnreadable"),
        "CM_TEST_BMC_UNSET": ("password_env", "SecretMissing"),
    }
    for where, (source, code) in unreadable.items():
        key = "secret_file" if source == "password_file" else "secret_env"
        provider = lab.provider(credentials={"source": source, "username": USER, key: where})
        with pytest.raises(ProviderError) as caught:
            provider.launch(spec(["n-001"]), 1, "req-secret-1")
        assert caught.value.kind is ErrorKind.AUTH and caught.value.code == code
        assert where in str(caught.value) and "\n" not in str(caught.value)
        checks = provider.check()
        assert [c.name for c in checks] == ["credentials"] and not checks[0].ok
    assert all(lab.actions(n) == [] for n in NODES)


@pytest.mark.parametrize("kind", ["ipmi", "redfish"])
def test_secrets_stay_out_of_argv_reprs_and_settings(kind: str, tmp_path: Path) -> None:
    entries = [{"nodes": "n-001", "address": "127.0.0.1", "port": 9}]
    settings = Lab(kind, tmp_path, entries, {}).settings()
    node = bmc_nodes(settings)["n-001"]
    secret = read_password(node, settings.name)
    assert secret.reveal() == PASSWORD
    dumped = settings.model_dump_json()
    assert '"bmc_nodes":[{"nodes":"n-001"' in dumped  # its own keys are in the dump
    no_secret_in(repr(secret), str(secret), f"{secret}", repr(node), dumped)
    if kind != "ipmi":
        return
    argv = Ipmitool(settings).argv("ipmitool", node, ("chassis", "power", "status"))
    assert "-E" in argv and "-P" not in argv  # the password travels in the environment
    no_secret_in(" ".join(argv))


# --------------------------------------------------------------------------- configuration

BMC_BASE = """
[[providers]]
name = "rack1"
type = "ipmi"
region = "hall-a"
credentials = { source = "password_file", username = "admin", secret_file = "/x" }
bmc_nodes = [{ nodes = "gpu-[01-04]", address = "{node}-bmc" }]
"""


def test_the_example_config_documents_valid_ipmi_and_redfish_providers() -> None:
    text = EXAMPLE_CONFIG.read_text()
    block = re.search(r"# >>> on-prem power.*?\n(.*?)# <<< on-prem power", text, re.S)
    assert block, "etc/clustermgr.toml.example lacks the on-prem power section"
    uncommented = "\n".join(  # "# key = ..." is an example line, "## ..." a comment
        line[2:] if line.startswith("# ") else ("" if line == "#" else line)
        for line in block.group(1).splitlines()
    )
    example = load_settings(EXAMPLE_CONFIG)
    data = {"cluster": {"name": example.cluster.name}}
    settings = parse_settings({**data, **tomllib.loads(uncommented)}, "example on-prem")
    assert {p.type for p in settings.providers} == {"ipmi", "redfish"}
    for provider in settings.providers:
        assert provider.bmc_node_names and provider.billing.increment_s == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('username = "admin", ', ""), "needs credentials.username"),
        (('secret_file = "/x"', 'secret_file = "/x", password = "hunter2"'), "unknown key"),
        (("{node}-bmc", "bmc"), "same BMC address"),
        (('region = "hall-a"', 'region = "hall-a"\nmax_instances = 4'), "not used by ipmi"),
        (('region = "hall-a"', 'region = "hall-a"\nredfish_scheme = "http"'), "only for redfish"),
        (('region = "hall-a"', 'region = "hall-a"\nbmc_timeout_s = 0'), "bmc_timeout_s"),
        (("bmc_nodes = [", "bmc_nodes = [{ nodes = 'gpu-01', address = 'b' }, "), "listed twice"),
        (('source = "password_file"', 'source = "chain"'), "does not fit a ipmi provider"),
    ],
)
def test_bad_bmc_config_is_one_line_naming_the_field(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = tmp_path / "clustermgr.toml"
    path.write_text(BMC_BASE.replace(*change))
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    text = str(caught.value)
    assert message in text and "\n" not in text and "hunter2" not in text


def test_a_node_powered_by_two_providers_is_refused(tmp_path: Path) -> None:
    second = BMC_BASE.replace('"rack1"', '"rack1-again"').replace("{node}-bmc", "{node}-bmc2")
    path = tmp_path / "clustermgr.toml"
    path.write_text(BMC_BASE + second)
    with pytest.raises(ConfigError, match="in bmc_nodes of both providers"):
        load_settings(path)


def test_a_template_on_an_on_prem_power_provider_powers_its_bmc_nodes(tmp_path: Path) -> None:
    template = """
[[templates]]
name = "onprem-a100"
provider = "rack1"
partition = "gpu"
nodes = "gpu-[01-04]"
instance_types = ["onprem"]
image = "-"
cpus = 64
memory_mb = 512000
idle_kw = 2.5
min_on = 1
"""
    path = tmp_path / "clustermgr.toml"
    path.write_text(BMC_BASE + template)
    settings = load_settings(path)
    assert settings.template("onprem-a100").node_names == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    path.write_text(BMC_BASE + template.replace("gpu-[01-04]", "gpu-[01-05]"))
    with pytest.raises(ConfigError, match="not in bmc_nodes of provider 'rack1'"):
        load_settings(path)

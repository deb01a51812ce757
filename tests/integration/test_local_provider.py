"""The local provider beyond the shared contract: real namespaces and slurmd processes,
seen and stopped from another process, crashes (of a "VM", and of the launching process
between making a namespace and recording it), limits, concurrency, faults.json, AUTH."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import string
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import TAG_NODE, InstanceState, LaunchSpec
from clustermgr.providers.local import LocalProvider, conf_server_from, net
from clustermgr.providers.local import state as local_state
from clustermgr.providers.local.net import NETNS_DIR, namespace_pids, netns_name
from tests.fakes.local_harness import lab_on_bridge, settings_for, skip_unless_possible
from tests.labs.slurmlab import SlurmLab, pid_alive

pytestmark = pytest.mark.integration

SUBNET = "10.213.203.0/24"
CLUSTER = "lp"
NOBODY = 65534


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmLab]:
    skip_unless_possible()
    with lab_on_bridge(tmp_path_factory.mktemp("lab"), subnet=SUBNET) as made:
        yield made


@pytest.fixture
def state_dir(tmp_path: Path, lab: SlurmLab) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    provider = LocalProvider(settings_for(path, subnet=SUBNET), CLUSTER)
    leftovers = list(provider.list_instances()) if path.exists() else []
    if leftovers:
        provider.terminate(leftovers, "test-teardown")


def provider_for(state_dir: Path, **overrides: Any) -> LocalProvider:
    return LocalProvider(settings_for(state_dir, subnet=SUBNET, **overrides), CLUSTER)


def spec_for(lab: SlurmLab, *nodes: str, user_data: str | None = None) -> LaunchSpec:
    return LaunchSpec(
        template="local-cpu",
        instance_types=("local.cpu",),
        image="local",
        node_names=nodes,
        user_data=user_data
        if user_data is not None
        else f"exec /usr/sbin/slurmd -D -N x --conf-server '{lab.conf_server}'\n",
    )


def wait_for(condition: object, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def slurmd_pids(instance_id: str, node: str) -> list[int]:
    """slurmd processes in the instance's namespace (it enters it a moment after launch)."""
    wanted = f"slurmd -D -N {node}"
    return [p for p in namespace_pids(instance_id) if wanted in cmdline(p)]


def test_conf_server_is_read_from_the_engines_bootstrap_script() -> None:
    class Template(string.Template):
        delimiter = "@"

    text = (Path(__file__).resolve().parents[2] / "images" / "bootstrap.sh.tmpl").read_text()
    values = {
        "cluster": "c",
        "provider_type": "local",
        "node_tag": TAG_NODE,
        "munge_key": "/etc/munge/munge.key",
        "slurmd": "/usr/sbin/slurmd",
        "controller_version": "22.05.8",
        "key_url": "",
        "key_pin": "",
        "key_token": "",
    }
    rendered = Template(text).substitute(values, conf_server="10.213.7.1:40123")
    spec = LaunchSpec("t", ("local.cpu",), "local", ("n-001",), user_data=rendered)
    assert conf_server_from(spec) == "10.213.7.1:40123"
    empty = LaunchSpec(
        "t", ("local.cpu",), "local", ("n-001",), user_data=rendered.replace("10.213.7.1:40123", "")
    )
    with pytest.raises(ProviderError) as caught:
        conf_server_from(empty)
    assert caught.value.kind is ErrorKind.INVALID


def test_instance_is_a_slurmd_in_its_namespace_another_process_can_stop(
    lab: SlurmLab, state_dir: Path
) -> None:
    provider = provider_for(state_dir)
    result = provider.launch(spec_for(lab, "n-001"), 1, "req-ns-1")
    assert result.ok, result.errors
    inst = result.instances[0]
    assert inst.state is InstanceState.RUNNING
    assert inst.private_address and inst.private_address.startswith("10.213.203.")
    assert (NETNS_DIR / netns_name(inst.instance_id)).exists()
    assert wait_for(lambda: slurmd_pids(inst.instance_id, "n-001"))
    assert (state_dir / "logs" / f"{inst.instance_id}.log").exists()

    script = (
        "import json, sys\n"
        "from clustermgr.providers.local import LocalProvider, conf_server_from\n"
        "from tests.fakes.local_harness import settings_for\n"
        f"p = LocalProvider(settings_for(sys.argv[1], subnet={SUBNET!r}), {CLUSTER!r})\n"
        "seen = {i: x.state.value for i, x in p.list_instances().items()}\n"
        "p.terminate(list(seen), 'req-ns-2')\n"
        "print(json.dumps({'seen': seen, 'after': list(p.list_instances())}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    report = json.loads(done.stdout)
    assert report == {"seen": {inst.instance_id: "running"}, "after": []}
    assert not (NETNS_DIR / netns_name(inst.instance_id)).exists()
    assert provider.list_instances() == {}


def test_a_dead_slurmd_is_an_error_and_terminate_still_cleans_up(
    lab: SlurmLab, state_dir: Path
) -> None:
    provider = provider_for(state_dir)
    inst = provider.launch(spec_for(lab, "n-002"), 1, "req-crash-1").instances[0]
    assert wait_for(lambda: slurmd_pids(inst.instance_id, "n-002"))
    for pid in namespace_pids(inst.instance_id):
        # the "VM" crashes; a pid may be gone already (killing unshare takes its child along)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert wait_for(
        lambda: provider.list_instances()[inst.instance_id].state is InstanceState.ERROR
    )
    provider.terminate([inst.instance_id], "req-crash-2")
    assert provider.list_instances() == {}
    assert not (NETNS_DIR / netns_name(inst.instance_id)).exists()
    provider.terminate([inst.instance_id, "lc-00000000"], "req-crash-3")  # gone is fine


def test_max_instances_makes_a_partial_launch(lab: SlurmLab, state_dir: Path) -> None:
    provider = provider_for(state_dir, max_instances=1)
    result = provider.launch(spec_for(lab, "n-001", "n-002"), 2, "req-max-1")
    assert [i.node_name for i in result.instances] == ["n-001"]
    assert [(e.kind, e.code, e.count) for e in result.errors] == [
        (ErrorKind.CAPACITY, "InstanceLimitReached", 1)
    ]


def test_concurrent_launches_of_one_request_make_one_instance(
    lab: SlurmLab, state_dir: Path
) -> None:
    spec = spec_for(lab, "n-003")
    found: list[str] = []

    def launch() -> None:
        result = provider_for(state_dir).launch(spec, 1, "req-race-1")
        found.extend(i.instance_id for i in result.instances)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(found) == 4 and len(set(found)) == 1
    assert list(provider_for(state_dir).list_instances()) == found[:1]


def test_faults_file_fails_launches_then_is_used_up(lab: SlurmLab, state_dir: Path) -> None:
    provider = provider_for(state_dir)
    provider.list_instances()  # makes the state dir
    local_state.inject_launch_fault(state_dir, ErrorKind.QUOTA, attempts=2)
    for attempt in (1, 2):
        result = provider.launch(spec_for(lab, "n-001"), 1, f"req-quota-{attempt}")
        assert result.instances == []
        assert [(e.kind, e.code, e.count) for e in result.errors] == [
            (ErrorKind.QUOTA, "QuotaExceeded", 1)
        ]
    assert not (state_dir / local_state.FAULTS_FILE).exists()
    assert provider.launch(spec_for(lab, "n-001"), 1, "req-quota-3").ok


def test_bad_specs_are_invalid_before_anything_starts(lab: SlurmLab, state_dir: Path) -> None:
    provider = provider_for(state_dir)
    bad = [
        (spec_for(lab, "n-001", user_data="#!/bin/sh\necho no conf server\n"), 1),
        (spec_for(lab, "n-001"), 2),  # two instances, one name
    ]
    for spec, count in bad:
        with pytest.raises(ProviderError) as caught:
            provider.launch(spec, count, "req-bad-1")
        assert caught.value.kind is ErrorKind.INVALID
        assert "local-cpu" in str(caught.value)
    assert provider.list_instances() == {}


def test_without_root_every_call_is_auth(lab: SlurmLab, state_dir: Path) -> None:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(read)
        outcome = "no error"
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            provider_for(Path("/tmp/cm-local-not-root")).list_instances()
        except ProviderError as exc:
            outcome = f"{exc.kind.value}: {exc.args[0]}"
        except BaseException as exc:
            outcome = repr(exc)
        os.write(write, outcome.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        outcome = pipe.read()
    os.waitpid(child, 0)
    assert outcome == "AUTH: cannot manage network namespaces: not root (needs CAP_NET_ADMIN)"


def test_check_and_catalog(lab: SlurmLab, state_dir: Path) -> None:
    provider = provider_for(state_dir)
    checks = provider.check()
    assert {c.name for c in checks} >= {"privileges", "ip", "unshare", "nsenter", "slurmd"}
    assert all(c.ok for c in checks), checks
    gpu2 = {t.name: t for t in provider.catalog()}["local.gpu2"]
    assert (gpu2.gpu_count, gpu2.vcpus) == (2, 2)


LAUNCH_IN_A_CHILD = """
import sys
from clustermgr.providers.local import LocalProvider
from clustermgr.providers.base import LaunchSpec
from tests.fakes.local_harness import settings_for
provider = LocalProvider(settings_for(sys.argv[1], subnet=sys.argv[2]), sys.argv[3])
spec = LaunchSpec(template="local-cpu", instance_types=("local.cpu",), image="local",
                  node_names=("n-001",), user_data=sys.argv[4])
provider.launch(spec, 1, "req-killed-1")
"""


def records(state_dir: Path) -> dict[str, str]:
    """instance id -> status, read as another process would (the file is replaced whole)."""
    path = state_dir / local_state.INSTANCES_FILE
    data = json.loads(path.read_text()) if path.exists() else {}
    return {r["instance_id"]: r["status"] for r in data.get("instances", [])}


def test_a_launch_killed_between_namespace_and_record_leaks_nothing(
    lab: SlurmLab, state_dir: Path
) -> None:
    provider = provider_for(state_dir)
    provider.list_instances()  # makes the state dir
    local_state.inject_stall(state_dir, "launch", seconds=120)
    spec = spec_for(lab, "n-001")
    child = subprocess.Popen(
        [sys.executable, "-c", LAUNCH_IN_A_CHILD, str(state_dir), SUBNET, CLUSTER, spec.user_data],
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )
    try:
        # the namespace and slurmd's boot script exist, the record does not say it runs
        assert wait_for(lambda: list(records(state_dir).values()) == ["starting"], timeout=30)
        # ...and the child is inside the stall (its use saved), so the launch below is not
        assert wait_for(lambda: not (state_dir / local_state.FAULTS_FILE).exists(), timeout=30)
        (dead,) = records(state_dir)
        assert (NETNS_DIR / netns_name(dead)).exists()
        on_its_way = namespace_pids(dead)
        assert on_its_way, "the boot script names its namespace until slurmd is inside"
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the launching daemon dies there
        child.wait(10)
    assert provider.list_instances()[dead].state is InstanceState.ERROR  # a half-made "VM"

    # the engine re-issues the interrupted request: the dead start is swept, one instance runs
    result = provider.launch(spec, 1, "req-killed-1")
    assert result.ok, result.errors
    (fresh,) = result.instances
    assert fresh.instance_id != dead and fresh.state is InstanceState.RUNNING
    assert records(state_dir) == {fresh.instance_id: "running"}
    assert not (NETNS_DIR / netns_name(dead)).exists()
    assert not any(pid_alive(pid) for pid in on_its_way)
    assert namespace_pids(dead) == []


def test_an_unrecorded_namespace_on_its_bridge_is_swept_another_bridges_is_not(
    lab: SlurmLab, state_dir: Path
) -> None:
    provider = provider_for(state_dir)
    provider.list_instances()
    ours = "lc-0000dead"  # as a version that saved the record after the namespace left it
    net.create_network(ours, net.Subnet.parse(SUBNET), "10.213.203.250")
    other = net.Subnet.parse("10.213.204.0/24")
    theirs = "lc-0000beef"  # another state dir's instance, on its own subnet and bridge
    net.ensure_bridge_for(other)
    try:
        net.create_network(theirs, other, "10.213.204.250")
        provider.terminate([], "req-sweep-1")  # any terminate (or launch) sweeps first
        assert not (NETNS_DIR / netns_name(ours)).exists()
        assert (NETNS_DIR / netns_name(theirs)).exists()
    finally:
        net.delete_network(ours)
        net.delete_network(theirs)
        net.remove_bridge_for(other)


def test_a_cloud_config_nfs_mount_with_no_stand_in_starts_nothing(
    lab: SlurmLab, state_dir: Path
) -> None:
    user_data = (
        "#cloud-config\n"
        'mounts:\n  - ["10.213.203.1:/home", "/home", nfs, "defaults"]\n'
        "write_files:\n  - path: /usr/local/sbin/boot\n    permissions: '0755'\n"
        f"    content: |\n      exec /usr/sbin/slurmd -D -N x --conf-server '{lab.conf_server}'\n"
        "runcmd:\n  - [/usr/local/sbin/boot]\n"
    )
    provider = provider_for(state_dir)
    result = provider.launch(spec_for(lab, "n-001", user_data=user_data), 1, "req-nfs-1")
    assert not result.instances
    [error] = result.errors
    assert error.kind is ErrorKind.INVALID
    assert 'nfs_stand_in ("10.213.203.1:/home" = "/host/path")' in error.message
    assert provider.list_instances() == {}
    assert not [n for n in net.namespaced_instances() if net.on_bridge(n, net.Subnet.parse(SUBNET))]

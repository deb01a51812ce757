"""The munge key reaches only root on a node of this cluster (docs/security.md, "The munge
key"). A real burst: the local provider's node (slurmd in its own network and mount
namespaces) redeems its launch's one-time token at cm-scale's key server, runs its own
munged with the key it got, and slurmd joins. Then the attacks: a job of `cmsec-mallory` on
that node, with the token from the user-data and without; the token replayed from the node;
a process in another namespace of the region's subnet. Each gets "refused" and no key."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.providers.local import net
from tests.conftest import cannot_run
from tests.e2e.conftest import _can_burst, slurm_user_for_hooks
from tests.labs.burstlab import BurstLab, BurstLabSpec
from tests.security.conftest import ATTACKER, Accounts, as_user

SUBNET = "10.213.191.0/24"  # SHARED_GROUPS "munge-key-subnet" in tests/conftest.py
PROBE_NS = "cm-mkprobe"  # another host of the subnet (not an instance: no lc- prefix)
PROBE_VETH = "mkprobe-h"
PROBE_ADDRESS = "10.213.191.250"
HEAD_KEY = Path("/etc/munge/munge.key")


@dataclass(frozen=True)
class BurstNode:
    lab: BurstLab
    instance_id: str
    address: str
    key_url: str
    token: str  # from the instance's user-data, as its metadata service shows it


def user_data_fact(text: str, name: str) -> str:
    found = re.search(rf"^{name}='([^']*)'$", text, re.MULTILINE)
    assert found, f"{name} is not in the user-data"
    return found.group(1)


@pytest.fixture(scope="module")
def burst_node(accounts: Accounts) -> Iterator[BurstNode]:
    missing = _can_burst()
    if missing:
        cannot_run(f"the munge key e2e cannot run: {missing}")
    workdir = Path(tempfile.mkdtemp(prefix="cm-mungekey-", dir="/tmp"))
    workdir.chmod(0o755)
    spec = BurstLabSpec(
        demand_mode="slurm",
        slurm_user=slurm_user_for_hooks(),
        subnet=SUBNET,
        cluster="mklab",
        nodes="cloud[1-2]",
        boot_timeout_s=400,  # the attacks below run inside the boot window
    )
    lab = BurstLab(workdir, spec)
    try:
        lab.start()
        job = lab.sbatch("--wrap", "hostname")
        lab.run_until(lambda: lab.job_field(job, "JobState") == "COMPLETED", timeout_s=240)
        (instance,) = lab.instances()
        iid = instance["instance_id"]
        user_data = (lab.state_dir / "local" / "boot" / f"{iid}.user-data").read_text()
        yield BurstNode(
            lab,
            iid,
            instance["private_address"],
            user_data_fact(user_data, "KEY_URL"),
            user_data_fact(user_data, "KEY_TOKEN"),
        )
    finally:
        lab.stop()
        if not os.environ.get("CM_KEEP_LAB"):
            shutil.rmtree(workdir, ignore_errors=True)


def node_munged_pid(instance_id: str) -> int:
    for pid in net.namespace_pids(instance_id):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "munged":
                return pid
        except OSError:
            continue
    raise AssertionError(f"no munged runs in {instance_id}'s namespace")


def test_root_boot_gets_the_key_and_slurmd_joins(burst_node: BurstNode) -> None:
    """The job completed on the node (fixture): slurmd joined, signing with the node's own
    munged, whose key is the head's, root/munge-only, in the node's private /etc/munge."""
    node = burst_node
    assert f"munge key handed to {node.address}" in node.lab.key_server_log()
    munged = node_munged_pid(node.instance_id)
    node_key = Path(f"/proc/{munged}/root/etc/munge/munge.key")
    assert node_key.read_bytes() == HEAD_KEY.read_bytes()
    info = node_key.stat()
    assert (info.st_mode & 0o777, info.st_uid) == (0o400, HEAD_KEY.stat().st_uid)
    # the node's mount namespace hides this machine's munged: its socket is the node's own
    assert os.stat(f"/proc/{munged}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino
    assert not (node.lab.state_dir / "local" / "boot" / f"{node.instance_id}.token").exists()


JOB = """#!/bin/sh
cd "$HOME_DIR"
code=$(curl -sS --insecure --max-time 20 -o with-token.out -w '%{http_code}' \\
    --data-binary @token "$KEY_URL")
echo "with-token $code"
code=$(curl -sS --insecure --max-time 20 -o without-token.out -w '%{http_code}' \\
    -X POST "$KEY_URL")
echo "without-token $code"
if cat /etc/munge/munge.key > read.out 2>&1; then echo "read ok"; else echo "read refused"; fi
"""


def test_a_users_job_on_the_burst_node_cannot_get_the_key(
    burst_node: BurstNode, accounts: Accounts
) -> None:
    node = burst_node
    lab = node.lab
    home = lab.workdir / "mallory"
    home.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, accounts.attacker.uid, accounts.attacker.gid)
    (home / "token").write_text(node.token)  # what the metadata service shows any user
    script = home / "job.sh"
    script.write_text(JOB)
    for path in (home / "token", script):
        os.chown(path, accounts.attacker.uid, accounts.attacker.gid)
    assert lab.lab is not None
    submitted = as_user(
        ATTACKER,
        [
            "sbatch",
            "--parsable",
            "-p",
            lab.spec.partition,
            f"--chdir={home}",
            f"--output={home}/job.out",
            f"--export=ALL,HOME_DIR={home},KEY_URL={node.key_url}",
            str(script),
        ],
        env=lab.lab.env,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    lab.run_until(lambda: lab.job_field(job, "JobState") == "COMPLETED", timeout_s=120)
    assert lab.job_field(job, "NodeList") == lab.instances()[0]["node"]
    said = (home / "job.out").read_text()
    assert "with-token 403" in said
    assert "without-token 400" in said
    assert "read refused" in said
    key = HEAD_KEY.read_bytes()
    for name in ("with-token.out", "without-token.out", "read.out"):
        assert key not in (home / name).read_bytes()
    assert f"munge key refused to {node.address}" in lab.key_server_log()


def fetch_as_root(namespace: str, url: str, token: str | None) -> tuple[str, bytes]:
    """curl in `namespace` as root: (HTTP status, body)."""
    with tempfile.TemporaryDirectory() as scratch:
        body = Path(scratch) / "body"
        argv = ["nsenter", f"--net=/var/run/netns/{namespace}", "curl", "-sS", "--insecure"]
        argv += ["--max-time", "20", "-o", str(body), "-w", "%{http_code}"]
        argv += ["--data-binary", "@-"] if token is not None else ["-X", "POST"]
        done = subprocess.run(
            [*argv, url], input=token or "", capture_output=True, text=True, timeout=60
        )
        return done.stdout.strip(), body.read_bytes() if body.exists() else b""


@pytest.fixture
def probe_namespace(burst_node: BurstNode) -> Iterator[str]:
    """A namespace on the region's bridge with an address no instance holds."""
    subnet = net.Subnet.parse(SUBNET)
    net.ip("netns", "add", PROBE_NS)
    try:
        net.ip("link", "add", PROBE_VETH, "type", "veth", "peer", "name", "eth0", "netns", PROBE_NS)
        net.ip("link", "set", PROBE_VETH, "master", subnet.bridge, "up")
        net.ip("-n", PROBE_NS, "addr", "add", f"{PROBE_ADDRESS}/24", "dev", "eth0")
        net.ip("-n", PROBE_NS, "link", "set", "eth0", "up")
        yield PROBE_NS
    finally:
        net.ip("link", "del", PROBE_VETH, ok_if=("Cannot find device",))
        net.ip("netns", "del", PROBE_NS, ok_if=("No such file",))


def test_a_replay_from_the_node_and_another_host_of_the_subnet_are_refused(
    burst_node: BurstNode, probe_namespace: str
) -> None:
    node = burst_node
    key = HEAD_KEY.read_bytes()
    replay = fetch_as_root(net.netns_name(node.instance_id), node.key_url, node.token)
    elsewhere = fetch_as_root(probe_namespace, node.key_url, node.token)
    tokenless = fetch_as_root(probe_namespace, node.key_url, None)
    assert (replay[0], elsewhere[0], tokenless[0]) == ("403", "403", "400")
    assert all(key not in body for _status, body in (replay, elsewhere, tokenless))
    log = node.lab.key_server_log()
    assert f"munge key refused to {node.address}" in log
    assert "already redeemed from this address" in log
    assert f"munge key refused to {PROBE_ADDRESS}" in log
    assert "not the address of a burst node cm-scale launched" in log
    assert node.token not in log

"""SlurmLab: a real slurmctld starts in a moment, shows its CLOUD nodes powered down, and
runs jobs (GPU ones too, on fake GPUs) on burst nodes the local provider starts."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clustermgr.providers.base import InstanceState, LaunchSpec
from clustermgr.providers.local import LocalProvider
from clustermgr.providers.local.net import NETNS_DIR, netns_name
from tests.fakes.local_harness import lab_on_bridge, settings_for, skip_unless_possible
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab, pid_alive

pytestmark = pytest.mark.integration

SUBNET = "10.213.202.0/24"


@pytest.fixture(autouse=True)
def _possible() -> None:
    skip_unless_possible()


def sinfo_nodes(lab: SlurmLab) -> dict[str, dict[str, Any]]:
    data = json.loads(lab.run("sinfo", "--json").stdout)
    return {node["name"]: node for node in data["nodes"]}


def test_cloud_nodes_show_powered_down_and_labs_do_not_collide(tmp_path: Path) -> None:
    groups = [
        NodeGroup("cloud[1-2]", features=("cloud",)),
        NodeGroup("gpu-a100-[001-002]", gpus=2, gpu_model="a100", weight=10),
    ]
    partitions = [
        Partition("cloud", "cloud[1-2]", default=True),
        Partition("gpu", "gpu-a100-[001-002]"),
    ]
    seen = []
    for run in ("first", "second"):
        started = time.monotonic()
        with SlurmLab(tmp_path / run, groups, partitions) as lab:
            assert time.monotonic() - started < 10
            nodes = sinfo_nodes(lab)
            assert sorted(nodes) == ["cloud1", "cloud2", "gpu-a100-001", "gpu-a100-002"]
            for node in nodes.values():
                assert node["state"] == "idle"
                assert set(node["state_flags"]) == {"CLOUD", "POWERED_DOWN"}
            assert set(lab.node_states().values()) == {"idle~"}
            assert lab.node_fields("gpu-a100-001")["Gres"] == "gpu:a100:2"
            conf = lab.conf_path.read_text()
            assert "PrivateData=cloud" in conf and "GresTypes=gpu" in conf
            seen.append((lab.cluster_name, lab.port, lab.pid))
        pid = seen[-1][2]
        assert pid is not None and not pid_alive(pid)
        lab.stop()  # idempotent
    assert seen[0][:2] != seen[1][:2]


@pytest.fixture
def lab_dir() -> Iterator[Path]:
    """World-traversable, so SlurmUser=slurm reaches the lab (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="cm-slurmlab-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def wait_until(lab: SlurmLab, condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    queue = lab.run("squeue", "-o", "%i %T %r %N", check=False).stdout
    raise AssertionError(
        f"{what} not reached in {timeout:.0f} s; nodes {lab.node_states()}; queue {queue}; "
        f"slurmctld: {lab.log_tail()}"
    )


def test_jobs_run_on_burst_nodes_with_fake_gpus(lab_dir: Path) -> None:
    provider = LocalProvider(settings_for(lab_dir / "local-state", subnet=SUBNET), "lab")
    with lab_on_bridge(lab_dir / "slurm", subnet=SUBNET, slurm_user="slurm") as lab:
        spec = LaunchSpec(
            template="local-gpu",
            instance_types=("local.gpu2",),
            image="local",
            node_names=("n-001", "n-002"),
            user_data=f"exec /usr/sbin/slurmd -D -N NAME --conf-server '{lab.conf_server}'\n",
        )
        try:
            result = provider.launch(spec, 2, "req-lab-1")
            assert result.ok, result.errors
            for inst in result.instances:
                node = inst.node_name or ""
                lab.run(
                    "scontrol",
                    "update",
                    f"nodename={node}",
                    f"nodeaddr={inst.private_address}",
                    f"nodehostname={node}",
                )
                lab.run("scontrol", "update", f"nodename={node}", "state=power_up")
            wait_until(
                lab,
                lambda: {lab.node_states()[n] for n in ("n-001", "n-002")} == {"idle"},
                30,
                "burst nodes idle",
            )
            flags = sinfo_nodes(lab)["n-001"]["state_flags"]
            assert "POWERED_DOWN" not in flags
            assert lab.node_fields("n-001")["NodeAddr"] == result.instances[0].private_address

            def submit(*args: str) -> str:
                out = lab.run("sbatch", "--parsable", f"--chdir={lab_dir}", *args).stdout
                return out.strip()

            two_node = submit("-N2", f"--output={lab_dir}/two.out", "--wrap", "srun hostname")
            gpu = submit(
                "--gres=gpu:2",
                "--nodelist=n-001",  # not n-003, which nobody starts
                f"--output={lab_dir}/gpu.out",
                "--wrap",
                "echo GPUS=$CUDA_VISIBLE_DEVICES",
            )

            def finished() -> bool:
                # squeue -j lists finished jobs too: ask for the live states only
                out = lab.run("squeue", "-h", "-t", "PD,CF,R,CG", "-o", "%i").stdout
                return not ({two_node, gpu} & set(out.split()))

            wait_until(lab, finished, 60, "jobs finished")
            for job in (two_node, gpu):
                fields = lab.run("scontrol", "show", "job", job, "-o").stdout
                assert "JobState=COMPLETED" in fields, fields
            assert "GPUS=0,1" in (lab_dir / "gpu.out").read_text()
            assert len((lab_dir / "two.out").read_text().split()) == 2
        finally:
            listed = provider.list_instances()
            provider.terminate(list(listed), "req-lab-teardown")
        assert provider.list_instances() == {}
        for inst in result.instances:
            assert not (NETNS_DIR / netns_name(inst.instance_id)).exists()
            assert inst.state is InstanceState.RUNNING
    assert lab.pid is None

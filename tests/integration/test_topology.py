"""`clustermgr slurm conf --topology`: the topology.conf it writes, loaded by a real
slurmctld (TopologyPlugin=topology/tree) and read back with `scontrol show topology`."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cannot_run, run_cli
from tests.labs.slurmlab import NodeGroup, Partition, SlurmLab

pytestmark = pytest.mark.integration

CONFIG = """
[cluster]
name = "topo"
[slurm]
onprem_partitions = ["batch"]
[[providers]]
name = "local"
type = "local"
region = "here"
[[templates]]
name = "hpc-a"
provider = "local"
partition = "cloud"
nodes = "hpc[1-2]"
instance_types = ["local.small"]
image = "local"
cpus = 2
memory_mb = 1000
placement_group = "cluster-1"
[[templates]]
name = "hpc-b"
provider = "local"
partition = "cloud"
nodes = "hpc[3-4]"
instance_types = ["local.small"]
image = "local"
cpus = 2
memory_mb = 1000
placement_group = "cluster-1"
[[templates]]
name = "cpu"
provider = "local"
partition = "cloud"
nodes = "cpu[1-3]"
instance_types = ["local.small"]
image = "local"
cpus = 2
memory_mb = 1000
"""

GROUPS = [
    NodeGroup("on[1-2]", cpus=2, memory_mb=1000, cloud=False, address="127.0.0.1"),
    NodeGroup("hpc[1-4]", cpus=2, memory_mb=1000),
    NodeGroup("cpu[1-3]", cpus=2, memory_mb=1000),
]
PARTITIONS = [
    Partition("batch", "on[1-2]", default=True),
    Partition("cloud", "hpc[1-4],cpu[1-3]"),
]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    if os.geteuid() != 0:
        cannot_run("needs root to run slurmctld")
    made = SlurmLab(tmp_path / "slurm", GROUPS, PARTITIONS, resume_timeout=3600)
    try:
        yield made
    finally:
        made.stop()


def env_for(lab: SlurmLab, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    return {
        **lab.env,
        "CLUSTERMGR_CONFIG": str(config),
        "CLUSTERMGR_DB": f"sqlite:///{tmp_path / 'cm.db'}",
    }


def shown_topology(lab: SlurmLab) -> dict[str, dict[str, str]]:
    """`scontrol show topology`: switch name -> its fields (Nodes=, Switches=, Level=)."""
    out = lab.run("scontrol", "show", "topology").stdout
    switches: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "SwitchName" in fields:
            switches[fields["SwitchName"]] = fields
    return switches


def restart_with_topology(lab: SlurmLab, conf_out: str) -> None:
    """slurmctld reads TopologyPlugin only at start: the line `slurm conf` printed goes into
    the lab's slurm.conf and the controller starts again."""
    plugin = [line for line in conf_out.splitlines() if line.startswith("TopologyPlugin=")]
    assert plugin == ["TopologyPlugin=topology/tree"]
    lab.stop()
    lab.extra_conf = tuple(plugin)
    lab.start()


def test_topology_from_inventory_is_what_slurmctld_shows(lab: SlurmLab, tmp_path: Path) -> None:
    env = env_for(lab, tmp_path)
    lab.start()
    assert run_cli("db", "upgrade", env=env).returncode == 0
    synced = run_cli("nodes", "sync", env=env)  # the on-prem nodes come from the inventory
    assert synced.returncode == 0, synced.stderr
    path = lab.workdir / "topology.conf"  # beside slurm.conf, where slurmctld looks
    done = run_cli("slurm", "conf", "--topology", str(path), env=env)
    assert done.returncode == 0, done.stderr
    assert f"# topology.conf: {path} (4 switches)" in done.stdout
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o644 and info.st_uid == 0
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".topology.conf")]
    restart_with_topology(lab, done.stdout)
    shown = shown_topology(lab)
    assert set(shown) == {"cm-pg-local-cluster-1", "cm-t-cpu", "cm-onprem", "cm-top"}
    # the two templates sharing a placement group are one block, the other one its own
    assert shown["cm-pg-local-cluster-1"]["Nodes"] == "hpc[1-4]"
    assert shown["cm-pg-local-cluster-1"]["Level"] == "0"
    assert shown["cm-t-cpu"]["Nodes"] == "cpu[1-3]"
    assert shown["cm-onprem"]["Nodes"] == "on[1-2]"
    assert shown["cm-top"]["Level"] == "1"
    assert shown["cm-top"]["Switches"] == "cm-pg-local-cluster-1,cm-t-cpu,cm-onprem"


def test_site_topology_is_kept_and_joined_under_the_top(lab: SlurmLab, tmp_path: Path) -> None:
    env = env_for(lab, tmp_path)
    site = tmp_path / "site-topology.conf"
    site.write_text(
        "# the site's on-prem fabric\n"
        "SwitchName=rack1 Nodes=on1 LinkSpeed=100\n"
        "SwitchName=rack2 Nodes=on2\n"
        "SwitchName=core Switches=rack[1-2]\n"
    )
    lab.write_config()  # the lab's directory, before its controller ever starts
    path = lab.workdir / "topology.conf"
    args = ("slurm", "conf", "--topology", str(path), "--site-topology", str(site))
    done = run_cli(*args, env=env)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr  # the site file covers on-prem: no inventory needed
    restart_with_topology(lab, done.stdout)
    shown = shown_topology(lab)
    assert set(shown) == {"rack1", "rack2", "core", "cm-pg-local-cluster-1", "cm-t-cpu", "cm-top"}
    assert shown["rack1"]["Nodes"] == "on1" and shown["rack2"]["Nodes"] == "on2"
    assert shown["core"]["Level"] == "1"
    assert shown["cm-top"]["Switches"] == "core,cm-pg-local-cluster-1,cm-t-cpu"
    assert shown["cm-top"]["Level"] == "2"

    site.write_text("SwitchName=rack1 Nodes=on1,cpu1\n")  # a cloud node the site claims
    refused = run_cli(*args, env=env)
    assert refused.returncode == 2
    clash = "site topology lists cloud node(s) cpu1: clustermgr places a template's nodes"
    assert clash in refused.stderr
    site.write_text("SwitchName=rack1 Nodes=on1\nNodeName=on1\n")
    refused = run_cli(*args, env=env)
    assert refused.returncode == 2
    assert f"{site} line 2: 'NodeName=on1' is not one of" in refused.stderr

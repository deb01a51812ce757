"""Per-launch placement groups through the cycle, against each cloud's fake and a real
database: a 2-node launch goes into a group of its own (an AWS cluster placement group, an
Azure proximity placement group, an OpenStack server group), the group is deleted once its
nodes are gone, a group a crash left behind (its request issued, no node, no instance) is
deleted after the orphan grace period, and one whose request cm-scale never issued is left
alone. Groups are planted through the provider's own SDK client, as a crash between the
group's creation and the launch would leave them.

Slurm is the edge of the world here (ScriptedSlurm, as in test_onprem_engine)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from clustermgr.cli.plan_output import verdict_rows
from clustermgr.config import Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, Node
from clustermgr.db.ownership import NODE_LAUNCH, issue
from clustermgr.nodes.inventory import sync_nodes
from clustermgr.providers.base import Provider, ours
from clustermgr.providers.launch_groups import group_name
from clustermgr.providers.registry import make_provider
from clustermgr.scaling.engine import Engine
from clustermgr.workload.base import WorkloadNode
from tests.fakes import aws_harness, azure_harness, openstack_harness
from tests.fakes.azure_fake import MARKETPLACE_IMAGE
from tests.integration.test_onprem_engine import ScriptedSlurm
from tests.unit.test_policies import job

pytestmark = pytest.mark.integration

CLUSTER = "pgtest"
NODES = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]


@dataclass
class Cloud:
    """One cloud's fake as the test needs it: the provider, what a template of it takes, the
    groups that exist (name -> member count), and a group planted as cm-scale makes it."""

    provider: Provider
    entry: dict[str, Any]
    template: dict[str, Any]
    groups: Callable[[], dict[str, int]]
    plant: Callable[[str, str], None]  # (name, request id)


def dumped(settings: Any) -> dict[str, Any]:
    entry: dict[str, Any] = settings.model_dump(
        mode="json", exclude_none=True, exclude_defaults=True
    )
    return entry


@contextlib.contextmanager
def aws_cloud(tmp_path: Path) -> Iterator[Cloud]:
    with aws_harness.contract_harness(tmp_path) as aws:
        provider: Any = make_provider(aws.settings(name="cloud"), CLUSTER)

        def plant(name: str, request: str) -> None:
            tags = [{"Key": k, "Value": v} for k, v in ours(CLUSTER, "gpu", request, {}).items()]
            provider.ec2().create_placement_group(
                GroupName=name,
                Strategy="cluster",
                TagSpecifications=[{"ResourceType": "placement-group", "Tags": tags}],
            )

        yield Cloud(
            provider,
            dumped(aws.settings(name="cloud")),
            {"image": aws_harness.IMAGE, "subnets": list(aws.subnets()[:1])},
            lambda: {n: len(aws.fake.placement_members(n)) for n in aws.fake.placement_groups()},
            plant,
        )


@contextlib.contextmanager
def azure_cloud(tmp_path: Path) -> Iterator[Cloud]:
    with azure_harness.contract_harness(tmp_path) as azure:
        settings = azure.settings(name="cloud")
        provider: Any = make_provider(settings, CLUSTER)

        def plant(name: str, request: str) -> None:
            body = {
                "location": azure.fake.location,
                "tags": ours(CLUSTER, "gpu", request, {}),
                "properties": {"proximityPlacementGroupType": "Standard"},
            }
            groups = provider.compute().proximity_placement_groups
            groups.create_or_update(azure.fake.resource_group, name, body)

        yield Cloud(
            provider,
            dumped(settings),
            {
                "image": MARKETPLACE_IMAGE,
                "subnets": [azure.fake.vnet_subnet],
                "instance_types": list(azure_harness.DEFAULT_TYPES[:1]),
            },
            lambda: {n: len(azure.fake.ppg_members(n)) for n in azure.fake.ppg_names()},
            plant,
        )


@contextlib.contextmanager
def openstack_cloud(tmp_path: Path) -> Iterator[Cloud]:
    with openstack_harness.contract_harness(tmp_path) as stack:
        provider: Any = openstack_harness.fast(make_provider(stack.settings(name="cloud"), CLUSTER))

        def plant(name: str, request: str) -> None:
            provider.service("compute").create_server_group(name=name, policy="affinity")

        yield Cloud(
            provider,
            dumped(stack.settings(name="cloud")),
            {
                "image": "ubuntu-24.04",
                "network": "burst-net",
                "instance_types": list(openstack_harness.DEFAULT_FLAVORS[:1]),
            },
            lambda: {
                str(g["name"]): len(g["members"]) for g in stack.fake.server_groups.groups.values()
            },
            plant,
        )


CLOUDS = {"aws": aws_cloud, "azure": azure_cloud, "openstack": openstack_cloud}


def config(cloud: Cloud, tmp_path: Path) -> dict[str, Any]:
    key = tmp_path / "munge.key"
    key.write_bytes(secrets.token_bytes(128))
    key.chmod(0o600)
    template = {
        "name": "gpu",
        "provider": "cloud",
        "instance_types": ["p4d.24xlarge"],
        "partition": "cloud",
        "nodes": "gpu-[1-4]",
        "cpus": 4,
        "memory_mb": 1000,
        "placement": "per-launch",
        **cloud.template,
    }
    return {
        "cluster": {"name": CLUSTER},
        "slurm": {"munge_key_path": str(key)},
        "daemon": {"state_dir": str(tmp_path / "state"), "orphan_grace_s": 300},
        "providers": [cloud.entry],
        "templates": [template],
        "policy": {"chain": [{"name": "queue_depth"}]},
    }


@dataclass
class World:
    cloud: Cloud
    settings: Settings
    db: Database
    slurm: ScriptedSlurm
    now: datetime

    def engine(self) -> Engine:
        providers = {"cloud": self.cloud.provider}
        return Engine(self.settings, self.db, self.slurm, providers, clock=lambda: self.now)

    def instances(self) -> dict[str, str]:
        with self.db.session() as session:
            rows = session.scalars(select(Node).where(Node.instance_id.is_not(None)))
            return {row.name: row.instance_id or "" for row in rows}

    def events(self, kind: str) -> list[str]:
        with self.db.session() as session:
            query = select(ClusterEvent.message).where(ClusterEvent.kind == kind)
            return list(session.scalars(query))

    def issue(self, request_id: str, at: datetime) -> None:
        with self.db.session() as session:
            issue(session, request_id, NODE_LAUNCH, "cloud", "gpu", at)

    def plant(self, request_id: str, issued: datetime | None) -> str:
        """A group made for `request_id` (issued by cm-scale at `issued`, or never)."""
        if issued is not None:
            self.issue(request_id, issued)
        name = group_name(CLUSTER, "gpu", request_id, 80)
        self.cloud.plant(name, request_id)
        return name


@pytest.fixture(params=sorted(CLOUDS))
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    with CLOUDS[request.param](tmp_path) as cloud:
        settings = parse_settings(config(cloud, tmp_path))
        db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
        db.upgrade()
        asleep = frozenset({"CLOUD", "POWERED_DOWN"})
        nodes = {
            name: WorkloadNode(name, "IDLE", asleep, cpus=4, memory_mb=1000, partitions=("cloud",))
            for name in NODES
        }
        slurm = ScriptedSlurm(nodes)
        now = datetime.now(UTC)
        with db.session() as session:
            sync_nodes(session, settings, slurm.nodes, now)
        yield World(cloud, settings, db, slurm, now)


def test_a_launch_group_lives_as_long_as_its_nodes_and_crash_leftovers_go(world: World) -> None:
    world.slurm.pending = [
        job("7", partition="cloud", nodes=2, cpus_per_node=1, gpus_per_node=0,
            memory_per_node_mb=100)
    ]  # fmt: skip
    report = world.engine().cycle()
    assert report.error is None, report.error
    assert len(report.launched) == 2
    launched = world.instances()
    (made,) = world.cloud.groups()
    assert world.cloud.groups() == {made: 2}  # both instances in it

    # a crash left a group between its creation and the launch: its request was issued an
    # hour ago, no node and no instance carries it; another's request was never issued
    leftover = world.plant("r-00000000000000f1", world.now - timedelta(hours=1))
    foreign = world.plant("r-00000000000000f2", None)
    # tagged with a request cm-scale issued, but not a name cm-scale gives: not its group
    world.plant("r-00000000000000f3", world.now - timedelta(hours=1))
    site = "site-block-r-00000000000000f3"
    world.cloud.plant(site, "r-00000000000000f3")

    # the launch's instances go (terminated outside cm-scale): the next cycle fails the
    # nodes, and deletes the leftover; the launch's group is held by its nodes' request in
    # that cycle's snapshot, and goes in the cycle after
    world.slurm.pending = []
    world.cloud.provider.terminate(list(launched.values()), "outside")
    world.now += timedelta(minutes=10)
    world.engine().cycle()
    assert world.instances() == {}
    assert sorted(world.cloud.groups()) == sorted([made, foreign, site])
    world.now += timedelta(minutes=1)
    world.engine().cycle()
    assert sorted(world.cloud.groups()) == sorted([foreign, site])  # not cm-scale's: kept
    deleted = ",".join(world.events("placement"))
    assert leftover in deleted and made in deleted and foreign not in deleted


def test_a_group_within_the_grace_period_is_kept(world: World) -> None:
    young = world.plant("r-00000000000000e1", world.now)
    world.engine().cycle()
    assert list(world.cloud.groups()) == [young]
    world.now += timedelta(seconds=301)
    dry = world.engine().cycle(dry_run=True)  # says what a cycle would do, and does nothing
    assert dry.judgment is not None
    [row] = [r for r in verdict_rows(dry.judgment) if r["action"] == "verdict:placement-group"]
    assert row["target"] == "cloud" and young in row["reason"]
    assert list(world.cloud.groups()) == [young]
    world.engine().cycle()
    assert world.cloud.groups() == {}

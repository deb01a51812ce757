"""Per-launch placement groups through the cycle, against the AWS fake and a real database:
a 2-node launch goes into a group of its own, the group is deleted once its nodes are gone,
a group a crash left behind (its request issued, no node, no instance) is deleted after the
orphan grace period, and a group whose request cm-scale never issued is left alone.

Slurm is the edge of the world here (ScriptedSlurm, as in test_onprem_engine)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from clustermgr.config import Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, Node
from clustermgr.db.ownership import NODE_LAUNCH, issue
from clustermgr.nodes.inventory import sync_nodes
from clustermgr.providers.base import TAG_CLUSTER, TAG_REQUEST, TAG_TEMPLATE
from clustermgr.providers.launch_groups import group_name
from clustermgr.providers.registry import make_provider
from clustermgr.scaling.engine import Engine
from clustermgr.workload.base import WorkloadNode
from tests.fakes.aws_harness import IMAGE, AwsHarness, contract_harness
from tests.integration.test_onprem_engine import ScriptedSlurm
from tests.unit.test_policies import job

pytestmark = pytest.mark.integration

CLUSTER = "pgtest"
NODES = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]


def config(aws: AwsHarness, tmp_path: Path) -> dict[str, Any]:
    key = tmp_path / "munge.key"
    key.write_bytes(secrets.token_bytes(128))
    key.chmod(0o600)
    return {
        "cluster": {"name": CLUSTER},
        "slurm": {"munge_key_path": str(key)},
        "daemon": {"state_dir": str(tmp_path / "state"), "orphan_grace_s": 300},
        "providers": [
            aws.settings(name="aws").model_dump(
                mode="json", exclude_none=True, exclude_defaults=True
            )
        ],
        "templates": [
            {
                "name": "gpu",
                "provider": "aws",
                "instance_types": ["p4d.24xlarge"],
                "image": IMAGE,
                "subnets": list(aws.subnets()[:1]),
                "partition": "cloud",
                "nodes": "gpu-[1-4]",
                "cpus": 4,
                "memory_mb": 1000,
                "placement": "per-launch",
            }
        ],
        "policy": {"chain": [{"name": "queue_depth"}]},
    }


@dataclass
class World:
    aws: AwsHarness
    settings: Settings
    db: Database
    slurm: ScriptedSlurm
    now: datetime

    def engine(self) -> Engine:
        providers = {"aws": make_provider(self.settings.provider("aws"), CLUSTER)}
        return Engine(self.settings, self.db, self.slurm, providers, clock=lambda: self.now)

    def instances(self) -> dict[str, str]:
        with self.db.session() as session:
            rows = session.scalars(select(Node).where(Node.instance_id.is_not(None)))
            return {row.name: row.instance_id or "" for row in rows}

    def events(self, kind: str) -> list[str]:
        with self.db.session() as session:
            query = select(ClusterEvent.message).where(ClusterEvent.kind == kind)
            return list(session.scalars(query))

    def tagged_group(self, request_id: str) -> str:
        name = group_name(CLUSTER, "gpu", request_id)
        tags = {TAG_CLUSTER: CLUSTER, TAG_TEMPLATE: "gpu", TAG_REQUEST: request_id}
        self.aws.client().create_placement_group(
            GroupName=name,
            Strategy="cluster",
            TagSpecifications=[
                {
                    "ResourceType": "placement-group",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
        )
        return name


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with contract_harness(tmp_path) as aws:
        settings = parse_settings(config(aws, tmp_path))
        db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
        db.upgrade()
        asleep = frozenset({"CLOUD", "POWERED_DOWN"})
        slurm = ScriptedSlurm(
            {
                name: WorkloadNode(
                    name, "IDLE", asleep, cpus=4, memory_mb=1000, partitions=("cloud",)
                )
                for name in NODES
            }
        )
        now = datetime.now(UTC)
        with db.session() as session:
            sync_nodes(session, settings, slurm.nodes, now)
        yield World(aws, settings, db, slurm, now)


def test_a_launch_group_lives_as_long_as_its_nodes_and_crash_leftovers_go(world: World) -> None:
    fake = world.aws.fake
    world.slurm.pending = [
        job("7", partition="cloud", nodes=2, cpus_per_node=1, gpus_per_node=0,
            memory_per_node_mb=100)
    ]  # fmt: skip
    report = world.engine().cycle()
    assert report.error is None, report.error
    assert len(report.launched) == 2
    launched = world.instances()
    (made,) = fake.placement_groups()
    assert fake.placement_members(made) == set(launched.values())

    # a crash left a group between its creation and the launch: its request was issued an
    # hour ago, no node and no instance carries it; another carries a request never issued
    with world.db.session() as session:
        issue(
            session, "r-00000000000000f1", NODE_LAUNCH, "aws", "gpu", world.now - timedelta(hours=1)
        )
    leftover = world.tagged_group("r-00000000000000f1")
    foreign = world.tagged_group("r-00000000000000f2")

    # the cloud loses the launch's instances: the next cycle fails the nodes
    world.slurm.pending = []
    world.aws.client().terminate_instances(InstanceIds=list(launched.values()))
    world.now += timedelta(minutes=10)
    world.engine().cycle()
    assert world.instances() == {}
    assert sorted(fake.placement_groups()) == sorted([made, foreign])  # the leftover went
    # the launch's group: its nodes held its request in that cycle's snapshot; now none does
    world.now += timedelta(minutes=1)
    world.engine().cycle()
    assert fake.placement_groups() == [foreign]  # never issued by cm-scale: left alone
    deleted = ",".join(world.events("placement"))
    assert leftover in deleted and made in deleted and foreign not in deleted


def test_a_group_within_the_grace_period_is_kept(world: World) -> None:
    with world.db.session() as session:
        issue(session, "r-00000000000000e1", NODE_LAUNCH, "aws", "gpu", world.now)
    young = world.tagged_group("r-00000000000000e1")
    world.engine().cycle()
    assert world.aws.fake.placement_groups() == [young]
    world.now += timedelta(seconds=301)
    world.engine().cycle()
    assert world.aws.fake.placement_groups() == []

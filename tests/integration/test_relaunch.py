"""A relaunch replays the launch the database stored (issue 33, items 1 and 7): an
all-or-nothing launch interrupted at any step ends, after one restarted cycle, with the
job's whole set or none of it, and a cloud that ignores client tokens gets no duplicate.

Each cloud's real SDK against its fake, a real database, the real engine; Slurm is the edge
of the world (ScriptedSlurm). cm-scale "dies" where the chaos campaign kills it: at the
wake (LAUNCHING and the request's identity committed, no cloud call yet: Slurm's power-up
never returns), or after the cloud acted (the launch's instances planted through the
provider itself, then their node tags taken off or some of them terminated, as a process
killed before or between CreateTags, or while releasing a short answer, leaves them). The
restart is a new Engine on the same database and clouds.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from clustermgr.config import Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import LaunchRequest, Node
from clustermgr.db.ownership import issued_launch
from clustermgr.nodes.inventory import sync_nodes
from clustermgr.nodes.states import NodeState
from clustermgr.providers.aws.shapes import client_token
from clustermgr.providers.base import TAG_NODE, InstanceState, Provider
from clustermgr.providers.registry import make_provider
from clustermgr.scaling.clamp import LaunchOrder
from clustermgr.scaling.engine import Engine
from clustermgr.scaling.specs import LaunchSpecs
from clustermgr.workload.base import WorkloadNode
from tests.fakes import aws_harness, azure_harness, openstack_harness
from tests.fakes.azure_fake import MARKETPLACE_IMAGE
from tests.integration.test_onprem_engine import ScriptedSlurm
from tests.unit.test_policies import job

pytestmark = pytest.mark.integration

CLUSTER = "relaunch"
NODES = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]


class Killed(BaseException):
    """cm-scale's process dying (SIGKILL): nothing of ours catches it."""


@dataclass
class DyingSlurm(ScriptedSlurm):
    """Slurm whose power-up never returns: cm-scale dies at the wake, after LAUNCHING and
    the request were committed and before any cloud call."""

    def power_up(self, nodes: Sequence[str]) -> None:
        raise Killed


@dataclass
class Cloud:
    kind: str
    provider: Any
    harness: Any
    entry: dict[str, Any]
    template: dict[str, Any]
    groups: Callable[[], list[str]]  # the placement groups that exist


def dumped(settings: Any) -> dict[str, Any]:
    entry: dict[str, Any] = settings.model_dump(
        mode="json", exclude_none=True, exclude_defaults=True
    )
    return entry


@contextlib.contextmanager
def aws_cloud(tmp_path: Path) -> Iterator[Cloud]:
    with aws_harness.contract_harness(tmp_path) as aws:
        settings = aws.settings(name="cloud")
        template = {"image": aws_harness.IMAGE, "subnets": list(aws.subnets()[:1])}
        provider = make_provider(settings, CLUSTER)
        yield Cloud("aws", provider, aws, dumped(settings), template, aws.fake.placement_groups)


@contextlib.contextmanager
def azure_cloud(tmp_path: Path) -> Iterator[Cloud]:
    with azure_harness.contract_harness(tmp_path) as azure:
        settings = azure.settings(name="cloud")
        template = {
            "image": MARKETPLACE_IMAGE,
            "subnets": [azure.fake.vnet_subnet],
            "instance_types": list(azure_harness.DEFAULT_TYPES[:1]),
        }
        provider = make_provider(settings, CLUSTER)
        groups = azure.fake.ppg_names
        yield Cloud("azure", provider, azure, dumped(settings), template, groups)


@contextlib.contextmanager
def openstack_cloud(tmp_path: Path) -> Iterator[Cloud]:
    with openstack_harness.contract_harness(tmp_path) as stack:
        settings = stack.settings(name="cloud")
        provider = openstack_harness.fast(make_provider(settings, CLUSTER))
        template = {
            "image": "ubuntu-24.04",
            "network": "burst-net",
            "instance_types": list(openstack_harness.DEFAULT_FLAVORS[:1]),
        }

        def groups() -> list[str]:
            return [str(g["name"]) for g in stack.fake.server_groups.groups.values()]

        yield Cloud("openstack", provider, stack, dumped(settings), template, groups)


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
        "scaling_strategy": "all-or-nothing",
        **cloud.template,
    }
    return {
        "cluster": {"name": CLUSTER},
        "slurm": {"munge_key_path": str(key)},
        "daemon": {"state_dir": str(tmp_path / "state"), "orphan_grace_s": 0},
        "providers": [cloud.entry],
        "templates": [template],
        "policy": {"chain": [{"name": "queue_depth"}]},
    }


@dataclass
class World:
    cloud: Cloud
    settings: Settings
    db: Database
    nodes: dict[str, WorkloadNode]
    now: datetime

    def engine(self, slurm: ScriptedSlurm) -> Engine:
        slurm.pending = [
            job("7", partition="cloud", nodes=4, cpus_per_node=1, gpus_per_node=0,
                memory_per_node_mb=100)
        ]  # fmt: skip
        providers: dict[str, Provider] = {"cloud": self.cloud.provider}
        return Engine(self.settings, self.db, slurm, providers, clock=lambda: self.now)

    def die_at_the_wake(self) -> str:
        """A cycle that launches the job's 4 nodes all or nothing, killed at the wake; the
        request id it issued."""
        with pytest.raises(Killed):
            self.engine(DyingSlurm(dict(self.nodes))).cycle()
        (request_id,) = {r.request_id for r in self.rows().values() if r.request_id}
        return request_id

    def restart(self) -> None:
        report = self.engine(ScriptedSlurm(dict(self.nodes))).cycle()
        assert report.error is None, report.error

    def rows(self) -> dict[str, Node]:
        with self.db.session() as session:
            found = {n.name: n for n in session.scalars(select(Node))}
            session.expunge_all()
        return found

    def states(self) -> dict[str, str]:
        return {name: row.state for name, row in sorted(self.rows().items())}

    def live(self) -> dict[str, str | None]:
        """Live instances of the cluster: id -> node tag."""
        return {
            iid: inst.tags.get(TAG_NODE)
            for iid, inst in self.cloud.provider.list_instances().items()
            if inst.state not in (InstanceState.TERMINATED, InstanceState.STOPPING)
        }

    def order(self, request_id: str) -> LaunchOrder:
        """The order as the killed process issued it (from the stored identity)."""
        with self.db.session() as session:
            issued = issued_launch(session, request_id)
        assert issued is not None and issued.identity is not None
        identity = issued.identity
        return LaunchOrder(
            issued.template,
            identity.nodes,
            identity.market,
            request_id,
            "launched before the crash",
            jobs=identity.jobs,
            all_or_nothing=identity.all_or_nothing,
            stored=identity,
        )

    def plant(self, request_id: str) -> dict[str, str]:
        """What the killed process's launch left in the cloud: the request's instances, made
        by the provider itself from the stored identity (node -> instance id)."""
        spec = LaunchSpecs(self.settings, lambda: self.now)(self.order(request_id))
        result = self.cloud.provider.launch(spec, len(spec.node_names), request_id)
        assert result.ok, result.errors
        return {i.node_name or "": i.instance_id for i in result.instances}

    def whole_set(self) -> None:
        """The job's whole set: every node BOOTING on its own instance, tagged for it, and
        nothing else live."""
        rows = self.rows()
        assert {r.state for r in rows.values()} == {NodeState.BOOTING.value}, self.states()
        held = {r.instance_id: name for name, r in rows.items()}
        assert self.live() == held, (self.live(), held)

    def none_of_it(self) -> None:
        assert set(self.states().values()) == {NodeState.POWERED_DOWN.value}, self.states()
        assert self.live() == {}


@pytest.fixture(params=sorted(CLOUDS))
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    with CLOUDS[request.param](tmp_path) as cloud:
        yield made_world(cloud, tmp_path)


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[World]:
    with aws_cloud(tmp_path) as cloud:
        yield made_world(cloud, tmp_path)


def made_world(cloud: Cloud, tmp_path: Path) -> World:
    settings = parse_settings(config(cloud, tmp_path))
    db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    db.upgrade()
    asleep = frozenset({"CLOUD", "POWERED_DOWN"})
    nodes = {
        name: WorkloadNode(name, "IDLE", asleep, cpus=4, memory_mb=1000, partitions=("cloud",))
        for name in NODES
    }
    now = datetime.now(UTC)
    with db.session() as session:
        sync_nodes(session, settings, nodes, now)
    return World(cloud, settings, db, nodes, now)


# --- the identity is stored with the request, before the launch call ------------------------


def test_the_launch_identity_is_committed_before_the_cloud_is_called(world: World) -> None:
    request_id = world.die_at_the_wake()
    assert world.live() == {}  # died before any cloud call
    with world.db.session() as session:
        row = session.get(LaunchRequest, request_id)
        assert row is not None
        stored = (row.nodes, row.jobs, row.market, row.all_or_nothing, row.launch_group)
        assert row.client_token == request_id
    assert stored == (",".join(NODES), "7", "on-demand", True, "affinity")
    assert set(world.states().values()) == {NodeState.LAUNCHING.value}


# --- killed before the create call ----------------------------------------------------------


def test_killed_at_the_wake_with_capacity_free_the_relaunch_starts_the_whole_set(
    world: World,
) -> None:
    world.die_at_the_wake()
    world.restart()
    world.whole_set()
    if world.cloud.kind == "openstack":  # replayed as the one multi-create it was issued as
        servers = world.cloud.harness.fake.servers()
        assert len({s["reservation_id"] for s in servers}) == 1, servers


def test_killed_at_the_wake_with_capacity_scarce_the_relaunch_starts_none(world: World) -> None:
    """Room for 3 of the job's 4 nodes at restart: a relaunch rebuilt without all or
    nothing kept 3 instances running for a job that can never start; replayed whole, it
    keeps none, and the launch's empty placement group goes with it."""
    world.die_at_the_wake()
    world.cloud.harness.limit_capacity(3)
    world.restart()
    world.none_of_it()
    assert list(world.cloud.groups()) == []


def test_the_replayed_create_fleet_is_whole_and_carries_the_stored_client_token(
    aws: World,
) -> None:
    request_id = aws.die_at_the_wake()
    aws.restart()
    aws.whole_set()
    fleets = [c for c in aws.cloud.harness.fake.launch_calls() if c["Action"] == "CreateFleet"]
    (fleet,) = fleets
    assert fleet["OnDemandOptions.MinTargetCapacity"] == "4"
    assert fleet["TargetCapacitySpecification.TotalTargetCapacity"] == "4"
    assert fleet["ClientToken"] == client_token(CLUSTER, request_id, "bw0")
    group = fleet["LaunchTemplateConfigs.1.Overrides.1.Placement.GroupName"]
    assert group.endswith(request_id)  # the launch's own placement group


# --- killed after the create call (the cloud acted, cm-scale never bound) -------------------


def untag(world: World, instance_ids: Sequence[str]) -> None:
    """Take the node tags off, as a process killed before its CreateTags leaves them."""
    ec2 = world.cloud.provider.ec2()
    if instance_ids:
        ec2.delete_tags(Resources=list(instance_ids), Tags=[{"Key": TAG_NODE}, {"Key": "Name"}])


@pytest.mark.parametrize("tagged", [0, 2], ids=["before-tags", "between-tags"])
def test_a_fleet_whose_answer_was_lost_is_adopted_by_a_cloud_that_ignores_tokens(
    aws: World, tagged: int
) -> None:
    """Plain moto (no idempotency layer): re-issuing the fleet would start a second set. The
    relaunch adopts the request's instances (named or not) and creates nothing."""
    request_id = aws.die_at_the_wake()
    made = aws.plant(request_id)
    untag(aws, [made[n] for n in NODES[tagged:]])
    fake = aws.cloud.harness.fake
    fake.ignore_client_tokens()
    before = len(fake.launch_calls())
    aws.restart()
    assert len(fake.launch_calls()) == before  # nothing created
    aws.whole_set()
    assert sorted(aws.live().values()) == NODES  # each named for its node


def test_duplicates_a_token_blind_cloud_started_are_released(aws: World) -> None:
    """The killed process's fleet and a second one (a cloud that started the request
    twice): the relaunch keeps one set and terminates the other at once."""
    request_id = aws.die_at_the_wake()
    aws.cloud.harness.fake.ignore_client_tokens()
    first = aws.plant(request_id)
    second = aws.plant(request_id)
    untag(aws, list(first.values()) + list(second.values()))
    aws.restart()
    aws.whole_set()


@pytest.mark.parametrize("capacity", ["free", "scarce"])
def test_killed_while_releasing_a_short_answer_ends_whole_or_none(
    aws: World, capacity: str
) -> None:
    """Two of the fleet's four were released when cm-scale died: the relaunch releases the
    other two (not a set) and tries whole: the set with capacity free, none when scarce."""
    request_id = aws.die_at_the_wake()
    made = aws.plant(request_id)
    untag(aws, list(made.values()))
    aws.cloud.provider.terminate([made["gpu-1"], made["gpu-2"]], "release")
    if capacity == "scarce":
        aws.cloud.harness.limit_capacity(0)
    aws.restart()
    if capacity == "free":
        aws.whole_set()
    else:
        aws.none_of_it()
        assert aws.cloud.groups() == []  # the empty group deleted

"""The director lifecycle against the real AWS provider over the moto server fake, with a
real database: launched on demand, READY once it answers and its image is verified, killed
outside -> LOST -> replaced, stopped when idle, no second instance after a crash between the
launch call and the commit, orphan director instances terminated.

The one edge patched is the network endpoint: moto's private addresses (10.x) do not
exist, so the health check's TCP connect to a director's address goes to a real listener on
127.0.0.1 while that address is in `answering`."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import Director, Image, ImageReplica, Provider
from clustermgr.db.ownership import DIRECTOR_LAUNCH, issue
from clustermgr.directors.health import Connect, PortsAndReplicas, tcp_open
from clustermgr.directors.lifecycle import (
    DirectorLifecycle,
    launch_spec,
)
from clustermgr.directors.states import DirectorState, ensure, find, transition
from clustermgr.directors.strays import ROLE_DIRECTOR, TAG_ROLE
from clustermgr.providers.base import InstanceState
from clustermgr.providers.base import Provider as CloudProvider
from clustermgr.providers.registry import make_provider
from tests.conftest import run_cli
from tests.fakes.aws_harness import IMAGE, AwsHarness, contract_harness

pytestmark = pytest.mark.integration

NAME = "director-aws-east-us-east-1"
CLUSTER = "contract"
D = DirectorState


@dataclass
class World:
    harness: AwsHarness
    settings: Settings
    db: Database
    provider: CloudProvider
    listener: socket.socket
    answering: set[str] = field(default_factory=set)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def connect(self, address: str, port: int, timeout_s: float) -> bool:
        if address not in self.answering:
            return False
        return tcp_open("127.0.0.1", self.listener.getsockname()[1], timeout_s)

    def lifecycle(self, connect: Connect | None = None) -> DirectorLifecycle:
        return DirectorLifecycle(
            self.settings,
            self.db,
            lambda name: self.provider,
            PortsAndReplicas(self.settings, self.db, connect=connect or self.connect),
            clock=lambda: self.now,
            actor="test",
        )

    def run(self, demand: bool = True) -> Director:
        self.lifecycle().run({"aws-east"} if demand else set())
        return self.row()

    def row(self) -> Director:
        with self.db.session() as session:
            row = find(session, NAME)
            assert row is not None
            session.expunge(row)
            return row

    def directors(self) -> dict[str, InstanceState]:
        return {
            i.instance_id: i.state
            for i in self.provider.list_instances().values()
            if i.tags.get(TAG_ROLE) == ROLE_DIRECTOR
        }

    def alive(self) -> list[str]:
        """Director instances not terminated (the provider lists no terminated ones)."""
        return sorted(i for i, s in self.directors().items() if s is not InstanceState.TERMINATED)

    def events(self) -> list[tuple[str, str]]:
        with self.db.session() as session:
            row = find(session, NAME)
            assert row is not None
            return [(e.old_state, e.new_state) for e in row.events]


def config(harness: AwsHarness) -> dict[str, Any]:
    subnets = list(harness.subnets())
    return {
        "cluster": {"name": CLUSTER},
        "providers": [
            {
                "name": "aws-east",
                "type": "aws",
                "region": harness.fake.region,
                "endpoint_url": harness.fake.url,
                "retry_mode": "standard",
            }
        ],
        "templates": [
            {
                "name": "aws-cpu",
                "provider": "aws-east",
                "partition": "cloud",
                "nodes": "aws-[1-4]",
                "instance_types": ["c5.large"],
                "image": IMAGE,
                "subnets": subnets,
                "cpus": 2,
                "memory_mb": 1000,
            }
        ],
        "directors": [
            {
                "provider": "aws-east",
                "instance_type": "m5.large",
                "image": IMAGE,
                "subnets": subnets,
                "idle_stop_after_s": 600,
                "boot_timeout_s": 300,
                "health_interval_s": 60,
                "images": ["base"],
            }
        ],
        "daemon": {"orphan_grace_s": 0},
    }


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_world(tmp_path) as running:
        yield running


@contextlib.contextmanager
def running_world(tmp_path: Path) -> Iterator[World]:
    """The AWS fake, a database holding the provider, a closed health-check listener."""
    with contract_harness(tmp_path) as harness:
        settings = parse_settings(config(harness))
        db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
        db.upgrade()
        with db.session() as session:
            session.add(
                Provider(
                    name="aws-east",
                    type="aws",
                    region=harness.fake.region,
                    credentials_source="env",
                )
            )
        provider = make_provider(settings.provider("aws-east"), CLUSTER)
        with socket.create_server(("127.0.0.1", 0)) as listener:
            listener.listen(16)
            yield World(harness, settings, db, provider, listener, now=datetime.now(UTC))


def verify_image(world: World, director_id: int) -> None:
    with world.db.session() as session:
        image = Image(name="base", version="r1", checksum="sha256:abc", size_bytes=10)
        session.add(image)
        session.flush()
        session.add(
            ImageReplica(
                image_id=image.id,
                director_id=director_id,
                state="verified",
                checksum="sha256:abc",
                verified_at=world.now,
            )
        )


def test_launch_ready_lost_replaced_and_idle_stop(world: World) -> None:
    assert world.run(demand=False).state == D.STOPPED.value  # no demand: nothing launched
    assert world.directors() == {}

    booting = world.run()
    assert booting.state == D.BOOTING.value and booting.instance_id
    assert list(world.directors()) == [booting.instance_id]  # tagged role=director

    world.answering.add(booting.private_address or "")
    syncing = world.run()
    assert syncing.state == D.SYNCING.value and "image base has no revision" in syncing.health
    verify_image(world, syncing.id)
    ready = world.run()
    assert ready.state == D.READY.value and ready.healthy_at == world.now

    # killed outside clustermgr: LOST, what is left terminated, a replacement launched
    world.harness.client().terminate_instances(InstanceIds=[ready.instance_id])
    world.now += timedelta(seconds=61)
    replaced = world.run()
    assert replaced.state == D.BOOTING.value and replaced.instance_id != ready.instance_id
    assert world.events()[-3:] == [
        ("ready", "lost"),
        ("lost", "launching"),
        ("launching", "booting"),
    ]
    world.answering.add(replaced.private_address or "")
    syncing = world.run()  # the new instance holds no replica yet
    assert syncing.state == D.SYNCING.value and "not verified (stale)" in syncing.health
    with world.db.session() as session:
        replica = session.query(ImageReplica).one()  # the replication verifies it again
        replica.state, replica.checksum, replica.verified_at = "verified", "sha256:abc", world.now
    assert world.run().state == D.READY.value

    # idle: the clock starts at the first pass without demand, the stop comes 600 s later
    world.now += timedelta(seconds=61)
    assert world.run(demand=False).state == D.READY.value
    world.now += timedelta(seconds=600)
    stopped = world.run(demand=False)
    assert stopped.state == D.STOPPED.value and stopped.instance_id is None
    assert world.alive() == []


def test_a_failing_check_makes_it_unhealthy_then_lost_and_replaced(world: World) -> None:
    booting = world.run()
    world.answering.add(booting.private_address or "")
    verify_image(world, booting.id)
    assert world.run().state == D.READY.value  # booting -> syncing -> ready in one pass
    world.answering.clear()
    world.now += timedelta(seconds=60)
    sick = world.run()
    assert sick.state == D.UNHEALTHY.value and "no answer on port 389, 636, 873" in sick.health
    world.now += timedelta(seconds=180)  # lost_after_failed_checks (3) x health_interval_s
    replaced = world.run()
    assert replaced.state == D.BOOTING.value and replaced.instance_id != booting.instance_id
    assert world.alive() == [replaced.instance_id]


def test_boot_timeout_is_lost(world: World) -> None:
    assert world.run().state == D.BOOTING.value
    world.now += timedelta(seconds=301)
    assert world.run(demand=False).state == D.STOPPED.value  # lost, no demand: retired
    assert world.alive() == []
    reasons = [e.reason for e in world_events(world)]
    assert any("did not answer within boot_timeout_s = 300 s" in r for r in reasons)


def world_events(world: World) -> list[Any]:
    with world.db.session() as session:
        row = find(session, NAME)
        assert row is not None
        events = list(row.events)
        for event in events:
            session.expunge(event)
        return events


def crash_after_the_launch_call(world: World, request_id: str, call: bool) -> None:
    """What a cm-scale killed inside the launch left: the row LAUNCHING with its request id
    committed, and (call=True) the cloud's instance made, its id never committed."""
    with world.db.session() as session:
        row = ensure(session, "aws-east", world.harness.fake.region, actor="test", now=world.now)
        transition(row, D.LAUNCHING, "burst demand", "test", now=world.now)
        issue(session, request_id, DIRECTOR_LAUNCH, "aws-east", NAME, world.now)
        row.request_id = request_id
        row.launched_at = world.now
    if call:
        spec = launch_spec(world.settings.directors[0], NAME)
        world.provider.launch(spec, 1, request_id)


def test_a_crash_after_the_launch_call_adopts_the_instance(world: World) -> None:
    crash_after_the_launch_call(world, "d-crash-1", call=True)
    [made] = world.directors()
    adopted = world.run()
    assert adopted.state == D.BOOTING.value and adopted.instance_id == made
    assert list(world.directors()) == [made]


def test_a_crash_before_the_cloud_answered_reissues_the_same_request(world: World) -> None:
    crash_after_the_launch_call(world, "d-crash-2", call=False)
    launched = world.run()
    assert launched.state == D.BOOTING.value and launched.request_id == "d-crash-2"
    # the same request id again (a second crash and retry) never makes a second instance
    spec = launch_spec(world.settings.directors[0], NAME)
    again = world.provider.launch(spec, 1, "d-crash-2")
    assert [i.instance_id for i in again.instances] == [launched.instance_id]
    assert list(world.directors()) == [launched.instance_id]


def test_director_instances_no_row_holds_are_terminated_when_cm_scale_launched_them(
    world: World,
) -> None:
    """A stray of ours (its request id issued, the row long past it) is terminated; one
    launched with the director tags by someone else with the account's keys is left alone."""
    with world.db.session() as session:
        issue(session, "d-stray", DIRECTOR_LAUNCH, "aws-east", NAME, world.now)
    spec = launch_spec(world.settings.directors[0], NAME)
    stray = world.provider.launch(spec, 1, "d-stray").instances[0].instance_id
    forged = world.provider.launch(spec, 1, "d-forged").instances[0].instance_id
    assert world.alive() == sorted([stray, forged])
    world.now += timedelta(seconds=5)  # past the grace period (0 s here)
    world.run(demand=False)
    assert world.alive() == [forged]


def test_the_cli_lists_and_shows_directors(world: World) -> None:
    booting = world.run()
    url = world.db.url
    listed = run_cli("--db", url, "directors", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["name"], row["state"], row["instance_id"]) == (
        NAME,
        "booting",
        booting.instance_id,
    )
    shown = run_cli("--db", url, "directors", "show", NAME, "--json")
    detail = json.loads(shown.stdout)
    assert [e["new_state"] for e in detail["events"]] == ["launching", "booting"]
    assert detail["request_id"] == booting.request_id and detail["image_replicas"] == []
    table = run_cli("--db", url, "directors", "list")
    assert table.returncode == 0 and "booting" in table.stdout  # (names fold in a table)
    unknown = run_cli("--db", url, "directors", "show", "director-nope")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "no director named 'director-nope'" in unknown.stderr

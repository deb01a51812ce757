"""Rows read back from the database are outside input: a cycle of the real engine, with
the real AWS provider against moto and stand-in Slurm commands (the edge of the world),
over node rows someone wrote by hand into a real SQLite database.

- a node row with a state no cm-scale writes is skipped for that cycle with a warning (its
  instance is not swept as an orphan) and the other nodes are handled;
- a node's `private_address` that is not an IP address or a host name never reaches
  `scontrol` (no argv holds it), with a warning naming the node;
- the same for a director's row: its address is never connected to, and a row with an
  unknown state is skipped for the pass (its instance is not swept as an orphan).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from clustermgr.config import Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import Node
from clustermgr.directors.lifecycle import PassReport as DirectorReport
from clustermgr.directors.states import find
from clustermgr.nodes.inventory import sync_nodes
from clustermgr.providers.base import InstanceState, LaunchSpec, Provider
from clustermgr.providers.registry import make_provider
from clustermgr.scaling.engine import Engine
from tests.fakes.aws_harness import IMAGE, AwsHarness, contract_harness
from tests.integration.test_director_lifecycle import NAME as DIRECTOR
from tests.integration.test_director_lifecycle import World as DirectorWorld
from tests.integration.test_director_lifecycle import running_world

CLUSTER = "inputs"
EVIL_ADDRESSES = {"gpu-1": "1.2.3.4 nodehostname=evil", "gpu-4": "-oProxyCommand=touch /tmp/x"}


@dataclass
class World:
    settings: Settings
    db: Database
    provider: Provider
    scontrol_log: Path
    addresses: dict[str, str]  # node -> the address the cloud gave its instance
    instances: dict[str, str]  # node -> instance id

    def scontrol_calls(self) -> list[list[str]]:
        if not self.scontrol_log.exists():
            return []
        return [json.loads(line) for line in self.scontrol_log.read_text().splitlines()]


def stand_in_slurm(bin_dir: Path, nodes: list[str]) -> Path:
    """sinfo shows the nodes idle with no address yet, squeue an empty queue; scontrol
    records its argv (one JSON list a line) and succeeds."""
    bin_dir.mkdir()
    log = bin_dir / "scontrol.calls"
    records = [
        {"name": n, "state": ["IDLE"], "state_flags": ["CLOUD"], "cpus": 4, "address": n}
        for n in nodes
    ]
    (bin_dir / "sinfo.json").write_text(json.dumps({"nodes": records}))
    scripts = {
        "sinfo": f'#!/bin/sh\nexec cat "{bin_dir}/sinfo.json"\n',
        "squeue": "#!/bin/sh\nexit 0\n",
        "scontrol": (
            f"#!{sys.executable}\nimport json, sys\n"
            f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        ),
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return log


def config(aws: AwsHarness, tmp_path: Path) -> dict[str, Any]:
    return {
        "cluster": {"name": CLUSTER},
        "slurm": {"bin_dir": str(tmp_path / "bin"), "command_timeout_s": 10},
        "daemon": {"state_dir": str(tmp_path / "state"), "orphan_grace_s": 0},
        "providers": [
            {
                "name": "aws",
                "type": "aws",
                "region": aws.fake.region,
                "endpoint_url": aws.fake.url,
                "retry_mode": "standard",
            }
        ],
        "templates": [
            {
                "name": "gpu",
                "provider": "aws",
                "instance_types": ["p4d.24xlarge"],
                "image": IMAGE,
                "subnets": list(aws.subnets()),
                "partition": "cloud",
                "nodes": "gpu-[1-4]",
                "cpus": 4,
                "memory_mb": 1000,
            }
        ],
    }


@pytest.fixture
def world(tmp_path: Path, sqlite_url: str) -> Iterator[World]:
    with contract_harness(tmp_path) as aws:
        settings = parse_settings(config(aws, tmp_path))
        names = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
        log = stand_in_slurm(tmp_path / "bin", names)
        db = Database(sqlite_url)
        db.upgrade()
        provider = make_provider(settings.provider("aws"), CLUSTER)
        spec = LaunchSpec(
            template="gpu",
            instance_types=("p4d.24xlarge",),
            image=IMAGE,
            node_names=tuple(names),
            subnets=aws.subnets(),
            user_data="#cloud-config\n",
        )
        launched = provider.launch(spec, len(names), "req-inputs-1").instances
        assert len(launched) == len(names)
        instances = dict(zip(names, (i.instance_id for i in launched), strict=True))
        addresses = {n: i.private_address or "" for n, i in zip(names, launched, strict=True)}
        now = datetime.now(UTC)
        with db.session() as session:
            sync_nodes(session, settings, None, now=now)
            for row in session.scalars(select(Node)):
                row.state = "UP"
                row.provider, row.template = "aws", "gpu"
                row.instance_id = instances[row.name]
                row.request_id = "req-inputs-1"
                row.launched_at = row.state_since = now
                row.private_address = EVIL_ADDRESSES.get(row.name, addresses[row.name])
                if row.name == "gpu-3":
                    row.state = "EXPLODED"  # no cm-scale writes this
        try:
            yield World(settings, db, provider, log, addresses, instances)
        finally:
            db.dispose()


def test_bad_rows_are_skipped_for_their_node_and_the_cycle_goes_on(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine(world.settings, world.db, providers={"aws": world.provider})
    with caplog.at_level(logging.WARNING):
        report = engine.cycle()
    assert report.error is None, report.error

    # only gpu-2, whose row is sound, was told to Slurm, with the cloud's own address
    calls = world.scontrol_calls()
    told = [c for c in calls if any(a.startswith("nodeaddr=") for a in c)]
    assert told == [
        [
            "update",
            "nodename=gpu-2",
            f"nodeaddr={world.addresses['gpu-2']}",
            "nodehostname=gpu-2",
        ]
    ]
    every_arg = " ".join(a for call in calls for a in call)
    assert "evil" not in every_arg and "ProxyCommand" not in every_arg
    assert "gpu-1" not in every_arg and "gpu-4" not in every_arg and "gpu-3" not in every_arg

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "node 'gpu-3' skipped this cycle: unknown state 'EXPLODED' in the database" in warnings
    for node, address in EVIL_ADDRESSES.items():
        assert any(w.startswith(f"node {node}: address {address!r} refused") for w in warnings)

    # the unreadable row's instance is no orphan: it still runs, and its row is as it was
    listed = world.provider.list_instances()
    assert listed[world.instances["gpu-3"]].state is InstanceState.RUNNING
    assert all(listed[i].state is InstanceState.RUNNING for i in world.instances.values())
    with world.db.session() as session:
        states = {n.name: n.state for n in session.scalars(select(Node))}
    assert states == {"gpu-1": "UP", "gpu-2": "UP", "gpu-3": "EXPLODED", "gpu-4": "UP"}


@pytest.fixture
def director_world(tmp_path: Path) -> Iterator[DirectorWorld]:
    with running_world(tmp_path) as world:
        yield world


@dataclass
class Checks:
    """The health check's network edge: which addresses it was asked to connect to."""

    asked: list[str]

    def connect(self, address: str, port: int, timeout_s: float) -> bool:
        self.asked.append(address)
        return False


def director_pass(world: DirectorWorld, checks: Checks) -> DirectorReport:
    return world.lifecycle(connect=checks.connect).run({"aws-east"})


def tamper(world: DirectorWorld, **fields: str) -> None:
    with world.db.session() as session:
        row = find(session, DIRECTOR)
        assert row is not None
        for key, value in fields.items():
            setattr(row, key, value)


def test_a_director_row_with_a_bad_address_or_state_costs_only_itself(
    director_world: DirectorWorld,
) -> None:
    world, checks = director_world, Checks([])
    director_pass(world, checks)  # launched: BOOTING, with the cloud's address
    booting = world.row()
    assert booting.state == "booting" and booting.instance_id and booting.private_address

    tamper(world, private_address="1.2.3.4 nodehostname=evil")
    world.now += timedelta(seconds=5)
    director_pass(world, checks)
    assert "1.2.3.4 nodehostname=evil" not in checks.asked  # never connected to, synced to
    assert world.row().state == "booting"

    tamper(world, state="EXPLODED")
    world.now += timedelta(seconds=5)  # past the orphan grace (0 s)
    report = director_pass(world, checks)
    assert f"{DIRECTOR}: unknown state 'EXPLODED' in the database; skipped" in report.errors
    assert report.orphans == []  # its instance is not swept as an orphan
    assert booting.instance_id in world.alive()
    assert world.row().state == "EXPLODED"

"""History older than [database] retention_days goes; what a live node holds and the bill
stay (a site runs cm-scale for years: node_events, cluster_events, launch_requests and
job_runs otherwise grow without end)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clustermgr.db.database import Database
from clustermgr.db.models import (
    ClusterEvent,
    InstanceRun,
    JobRun,
    LaunchRequest,
    Node,
    NodeEvent,
)
from tests.conftest import EXAMPLE_CONFIG, run_cli

pytestmark = pytest.mark.integration


def test_db_prune_deletes_old_history_and_keeps_what_is_held_and_billed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cm.db'}"
    database = Database(url)
    database.upgrade()
    now = datetime.now(UTC)
    old, recent = now - timedelta(days=200), now - timedelta(days=3)
    with database.session() as session:
        node = Node(name="gpu-1", kind="cloud", state="UP", request_id="r-held")
        session.add(node)
        session.flush()
        for at in (old, recent):
            session.add(NodeEvent(node_id=node.id, at=at, old_state="A", new_state="B", actor="t"))
            session.add(ClusterEvent(at=at, kind="cycle", source="t", message="m"))
            session.add(JobRun(finished_at=at, user="u", shape="[]", limit_s=60, run_s=6))
        for request_id, at in (("r-held", old), ("r-spent", old), ("r-new", recent)):
            session.add(
                LaunchRequest(
                    request_id=request_id, kind="node", provider="p", owner="t", issued_at=at
                )
            )
        session.add(
            InstanceRun(
                node="gpu-0",
                template="t",
                provider="p",
                instance_id="i-1",
                instance_type="x",
                market="on-demand",
                started_at=old,
                ended_at=old + timedelta(hours=1),
            )
        )
    done = run_cli("--db", url, "--config", str(EXAMPLE_CONFIG), "db", "prune")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "pruned, older than 180 days: 1 node transitions, 1 cluster events, 1 launch request ids,"
        " 1 finished jobs' run times"
    )
    with database.session() as session:
        assert [e.at.date() for e in session.query(NodeEvent)] == [recent.date()]
        assert session.query(ClusterEvent).count() == 1
        assert [r.finished_at.date() for r in session.query(JobRun)] == [recent.date()]
        kept = sorted(r.request_id for r in session.query(LaunchRequest))
        assert kept == ["r-held", "r-new"]  # a node still holds r-held
        assert session.query(InstanceRun).count() == 1  # the bill stays
    shorter = run_cli("--db", url, "--config", str(EXAMPLE_CONFIG), "db", "prune", "--days", "1")
    assert "1 node transitions, 1 cluster events, 1 launch request ids" in shorter.stdout
    bad = run_cli("--db", url, "--config", str(EXAMPLE_CONFIG), "db", "prune", "--days", "0")
    assert bad.returncode == 2
    listed = run_cli("--db", url, "--config", str(EXAMPLE_CONFIG), "events", "--json")
    assert json.loads(listed.stdout) == []

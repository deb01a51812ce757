"""Model and migrations on SQLite and on the real PostgreSQL server."""

from __future__ import annotations

import itertools
import stat
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select

from clustermgr.config import load_settings
from clustermgr.core.errors import SchemaOutOfDateError
from clustermgr.db.database import SCHEMA_HEAD, Database, head_revision
from clustermgr.db.models import Base, Node
from clustermgr.nodes.inventory import sync_nodes
from clustermgr.nodes.states import NodeState
from tests.conftest import EXAMPLE_CONFIG, REPO, run_cli


def test_schema_head_constant_is_the_newest_migration() -> None:
    assert head_revision() == SCHEMA_HEAD


def test_migrations_build_exactly_the_model(db_url: str) -> None:
    database = Database(db_url)
    assert database.upgrade() == (None, head_revision())
    with database.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    database.require_current_schema()
    database.dispose()


def test_old_schema_is_refused_until_upgraded(db_url: str) -> None:
    from alembic import command

    from clustermgr.db.database import alembic_config

    database = Database(db_url)
    with database.engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    with pytest.raises(
        SchemaOutOfDateError, match=r"schema is at 0001, .* run `clustermgr db upgrade`"
    ):
        database.require_current_schema()
    result = run_cli("--db", db_url, "--config", str(EXAMPLE_CONFIG), "nodes", "list")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "clustermgr db upgrade" in result.stderr
    assert run_cli("--db", db_url, "db", "upgrade").returncode == 0
    database.require_current_schema()
    database.dispose()


def test_sync_then_versioned_updates(db_url: str) -> None:
    database = Database(db_url)
    database.upgrade()
    settings = load_settings(EXAMPLE_CONFIG)
    with database.session() as session:
        report = sync_nodes(session, settings, None)
    assert len(report.added) == 32
    with database.session() as session:
        node = session.scalars(select(Node).where(Node.name == "cloud1")).one()
        assert node.version == 1 and node.state == NodeState.POWERED_DOWN
        assert [e.new_state for e in node.events] == ["POWERED_DOWN"]
    database.dispose()


CONCURRENT_WORKER = textwrap.dedent(
    """
    import sys
    from sqlalchemy import select
    from sqlalchemy.orm.exc import StaleDataError
    from clustermgr.db.database import Database
    from clustermgr.db.models import Node
    from clustermgr.nodes.states import NodeState, transition

    url, actor, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    db = Database(url)
    done = conflicts = 0
    while done < rounds:
        try:
            with db.session() as session:
                node = session.scalars(select(Node).where(Node.name == "cloud1")).one()
                new = NodeState.DOWN if node.state == "POWERED_DOWN" else NodeState.POWERED_DOWN
                transition(node, new, f"{actor} round {done}", actor)
            done += 1
        except StaleDataError:
            conflicts += 1
    print(conflicts)
    """
)


def test_two_processes_updating_one_node_lose_nothing(db_url: str, tmp_path: Path) -> None:
    database = Database(db_url)
    database.upgrade()
    with database.session() as session:
        sync_nodes(session, load_settings(EXAMPLE_CONFIG), None)
    script = tmp_path / "worker.py"
    script.write_text(CONCURRENT_WORKER)
    rounds = 40
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), db_url, f"w{i}", str(rounds)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for i in range(2)
    ]
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), outputs
    with database.session() as session:
        node = session.scalars(select(Node).where(Node.name == "cloud1")).one()
        events = node.events[1:]  # after "registered"
        assert len(events) == 2 * rounds
        assert node.version == 1 + 2 * rounds
        for before, after in itertools.pairwise(events):
            assert after.old_state == before.new_state  # an unbroken chain: no lost update
    database.dispose()


def test_read_only_database_file_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ro' / 'clustermgr.db'}"
    assert run_cli("--db", url, "db", "upgrade").returncode == 0
    config = str(EXAMPLE_CONFIG)
    assert run_cli("--db", url, "--config", config, "nodes", "sync", "--no-slurm").returncode == 0
    (tmp_path / "ro" / "clustermgr.db").chmod(stat.S_IRUSR)
    ro_url = f"sqlite:///file:{tmp_path / 'ro' / 'clustermgr.db'}?mode=ro&uri=true"
    result = run_cli("--db", ro_url, "--config", config, "nodes", "sync", "--no-slurm")
    # nothing changed, so nothing to write: sync succeeds even on a read-only file
    assert result.returncode == 0, result.stderr
    changed = config_with_fewer_nodes(tmp_path)
    result = run_cli("--db", ro_url, "--config", str(changed), "nodes", "sync", "--no-slurm")
    assert result.returncode == 1
    line = result.stderr.strip()
    assert line.startswith("clustermgr: error: database sqlite:///file")
    assert line.endswith("is read-only: check file and directory permissions")
    assert "\n" not in line


def config_with_fewer_nodes(tmp_path: Path) -> Path:
    text = EXAMPLE_CONFIG.read_text().replace('nodes = "cloud[1-4]"', 'nodes = "cloud[1-3]"')
    path = tmp_path / "fewer.toml"
    path.write_text(text)
    return path


def test_unreachable_postgres_is_one_line(tmp_path: Path) -> None:
    url = "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/nope"
    result = run_cli("--db", url, "db", "current")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "clustermgr: error: database postgresql+psycopg://postgres:***@"
    )
    assert "hunter2" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0


def test_batched_moves_check_every_rows_version(db_url: str) -> None:
    """transition_all's executemany UPDATE (clustermgr/db/batched.py) on each server: the
    driver's summed rowcount sees a row another writer moved, the batch fails whole."""
    from sqlalchemy.orm.exc import StaleDataError

    from clustermgr.nodes.states import transition, transition_all

    database = Database(db_url)
    database.upgrade()
    with database.session() as session:
        sync_nodes(session, load_settings(EXAMPLE_CONFIG), None)
    names = ["cloud1", "cloud2", "cloud3"]
    query = select(Node).where(Node.name.in_(names)).order_by(Node.name)
    with pytest.raises(StaleDataError), database.session() as session:
        nodes = list(session.scalars(query))
        with database.session() as other:
            theirs = other.scalars(select(Node).where(Node.name == "cloud2")).one()
            transition(theirs, NodeState.REQUESTED, "theirs", "other")
        transition_all(
            session, [(n, "ours", {}) for n in nodes], NodeState.LAUNCHING, "us", datetime.now(UTC)
        )
    with database.session() as session:
        assert [(n.state, n.version) for n in session.scalars(query)] == [
            ("POWERED_DOWN", 1),
            ("REQUESTED", 2),
            ("POWERED_DOWN", 1),
        ]
        nodes = list(session.scalars(query))
        transition_all(
            session, [(n, "ours", {}) for n in nodes], NodeState.LAUNCHING, "us", datetime.now(UTC)
        )
    with database.session() as session:
        assert [(n.state, n.version) for n in session.scalars(query)] == [
            ("LAUNCHING", 2),
            ("LAUNCHING", 3),
            ("LAUNCHING", 2),
        ]
    database.dispose()

"""What a new admin ran into in the first hour (issue 26): each as the admin typed it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_CONFIG, run_cli

pytestmark = pytest.mark.integration
CM_SCALE = str(Path(sys.executable).with_name("cm-scale"))


def cm_scale(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [CM_SCALE, "--config", str(EXAMPLE_CONFIG), "--db", f"sqlite:///{db}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_json_without_dry_run_is_a_usage_error_and_starts_nothing(tmp_path: Path) -> None:
    db = tmp_path / "cm.db"
    done = cm_scale(db, "--json")
    assert done.returncode == 2, done.stderr
    assert "--json only goes with --dry-run" in done.stderr
    assert done.stdout == "" and not db.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["nodes", "list"],
        ["events"],
        ["policy", "dry-run"],
    ],
)
def test_a_command_on_a_database_never_created_leaves_nothing_behind(
    tmp_path: Path, argv: list[str]
) -> None:
    db = tmp_path / "state" / "cm.db"
    done = run_cli("--db", f"sqlite:///{db}", "--config", str(EXAMPLE_CONFIG), *argv)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"database {db} does not exist: run `clustermgr db upgrade`" in done.stderr
    assert not db.parent.exists()


def test_cm_scale_once_on_a_database_never_created_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "cm.db"
    done = cm_scale(db, "--once")
    assert done.returncode == 2, done.stderr
    assert "alembic" not in done.stderr and "INFO" not in done.stderr, done.stderr
    assert "does not exist: run `clustermgr db upgrade`" in done.stderr
    assert not db.exists()


def test_db_upgrade_still_creates_the_database(tmp_path: Path) -> None:
    db = tmp_path / "new" / "cm.db"
    assert run_cli("--db", f"sqlite:///{db}", "db", "upgrade").returncode == 0
    assert db.exists() and (db.stat().st_mode & 0o777) == 0o600
    listed = run_cli("--db", f"sqlite:///{db}", "--config", str(EXAMPLE_CONFIG), "nodes", "list")
    assert listed.returncode == 0, listed.stderr


def test_tables_show_hostlists_as_text(tmp_path: Path) -> None:
    """A bracketed hostlist in a table cell is text (rich would read `[a-001,b]` as markup
    and drop it): the cell shows exactly what --json says."""
    code = (
        "from clustermgr.cli.output import emit\n"
        "rows = [{'template': 'aws-gpu2', 'nodes': 'gpu-[001-064]', 'reason': '[bold]x[/bold]'}]\n"
        "emit(rows, ['template', 'nodes', 'reason'], False, 'Plan')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert "gpu-[001-064]" in done.stdout
    assert "[bold]x[/bold]" in done.stdout


def test_nodes_list_with_an_unknown_template_is_bad_input(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cm.db'}"
    assert run_cli("--db", db, "db", "upgrade").returncode == 0
    config = ("--db", db, "--config", str(EXAMPLE_CONFIG))
    assert run_cli(*config, "nodes", "sync", "--no-slurm").returncode == 0
    done = run_cli(*config, "nodes", "list", "--template", "nosuch")
    assert done.returncode == 2 and done.stdout == "", done
    assert "--template 'nosuch': no node has this template (known: " in done.stderr
    assert "local-gpu" in done.stderr
    typo = run_cli(*config, "nodes", "list", "--provider", "aws9")
    assert typo.returncode == 2 and "--provider 'aws9': no node has this provider" in typo.stderr
    none_down = run_cli(*config, "nodes", "list", "--template", "local-gpu", "--state", "up")
    assert none_down.returncode == 0 and "no nodes" in none_down.stdout  # known, none match


def test_cluster_events_have_a_command(tmp_path: Path) -> None:
    """What happened to the cluster rather than to a node (here an admin's `templates
    reset`) is listed by `events --cluster`, filtered by kind; a kind never recorded is a
    typo (exit 2)."""
    import json

    db = f"sqlite:///{tmp_path / 'cm.db'}"
    assert run_cli("--db", db, "db", "upgrade").returncode == 0
    config = ("--db", db, "--config", str(EXAMPLE_CONFIG))
    assert run_cli(*config, "templates", "reset", "local-gpu").returncode == 0
    listed = run_cli(*config, "events", "--cluster", "--json")
    assert listed.returncode == 0, listed.stderr
    (event,) = json.loads(listed.stdout)
    assert event["source"] == "clustermgr templates reset" and event["message"] == "local-gpu"
    by_kind = run_cli(*config, "events", "--cluster", "--kind", event["kind"])
    assert by_kind.returncode == 0 and "local-gpu" in by_kind.stdout
    typo = run_cli(*config, "events", "--cluster", "--kind", "refusl")
    assert typo.returncode == 2 and f"kinds recorded: {event['kind']}" in typo.stderr
    mixed = run_cli(*config, "events", "--kind", "cycle")
    assert mixed.returncode == 2 and "--kind goes with --cluster" in mixed.stderr


def test_config_check_speaks_json() -> None:
    import json

    done = run_cli("--config", str(EXAMPLE_CONFIG), "config", "check", "--no-slurm", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] is True and result["slurm_checked"] is False
    assert result["templates"] >= 1 and result["cloud_node_slots"] >= 1
    assert result["policy_chain"] and result["slurm_problems"] == []
    assert result["config"] == str(EXAMPLE_CONFIG)

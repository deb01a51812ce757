"""The admin CLI as a user runs it: a real child process against a SQLite file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_CONFIG, run_cli

CONFIG = str(EXAMPLE_CONFIG)


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'cm.db'}"
    assert run_cli("--db", url, "db", "upgrade").returncode == 0
    return url


def test_version_imports_no_cloud_sdk() -> None:
    code = (
        "import sys\n"
        "from clustermgr.cli.main import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('boto3', 'azure', 'openstack', 'sqlalchemy') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "clustermgr, version" in out.stdout
    assert "HEAVY []" in out.stdout


def test_sync_list_show_history_json(db: str) -> None:
    assert run_cli("--db", db, "--config", CONFIG, "nodes", "sync", "--no-slurm").returncode == 0
    listed = run_cli(
        "--db", db, "--config", CONFIG, "nodes", "list", "--template", "local-gpu", "--json"
    )
    rows = json.loads(listed.stdout)
    assert [r["name"] for r in rows] == ["cloud1", "cloud2", "cloud3", "cloud4"]
    assert set(rows[0]) >= {"name", "kind", "state", "template", "provider", "gpus", "instance_id"}
    assert rows[0]["state"] == "POWERED_DOWN" and rows[0]["gpus"] == 2
    shown = json.loads(
        run_cli("--db", db, "--config", CONFIG, "nodes", "show", "cloud2", "--json").stdout
    )
    assert shown["name"] == "cloud2" and shown["version"] == 1
    hist = json.loads(
        run_cli("--db", db, "--config", CONFIG, "nodes", "history", "cloud2", "--json").stdout
    )
    assert [(h["old_state"], h["new_state"]) for h in hist] == [("NEW", "POWERED_DOWN")]
    table = run_cli("--db", db, "--config", CONFIG, "nodes", "list", "--state", "powered_down")
    assert "aws-a100-016" in table.stdout and table.returncode == 0


def test_sync_twice_no_duplicates_and_removed_names_retire(db: str, tmp_path: Path) -> None:
    for _ in range(2):
        assert (
            run_cli("--db", db, "--config", CONFIG, "nodes", "sync", "--no-slurm").returncode == 0
        )
    rows = json.loads(run_cli("--db", db, "--config", CONFIG, "nodes", "list", "--json").stdout)
    assert len(rows) == 32 == len({r["name"] for r in rows})
    fewer = tmp_path / "fewer.toml"
    fewer.write_text(EXAMPLE_CONFIG.read_text().replace('"cloud[1-4]"', '"cloud[1-2]"'))
    result = run_cli("--db", db, "--config", str(fewer), "nodes", "sync", "--no-slurm")
    assert "2 retired" in result.stdout
    rows = json.loads(run_cli("--db", db, "--config", CONFIG, "nodes", "list", "--json").stdout)
    states = {r["name"]: r["state"] for r in rows}
    assert states["cloud3"] == states["cloud4"] == "RETIRED" and len(rows) == 32
    result = run_cli("--db", db, "--config", CONFIG, "nodes", "sync", "--no-slurm")
    assert "2 restored" in result.stdout


def test_invalid_config_writes_nothing(db: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE_CONFIG.read_text().replace("cpus = 96", "cpus = -1", 1))
    result = run_cli("--db", db, "--config", str(bad), "nodes", "sync", "--no-slurm")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"clustermgr: error: {bad}: templates[0:aws-a100].cpus: "
        "Input should be greater than or equal to 1 (got -1)"
    )
    rows = json.loads(run_cli("--db", db, "--config", CONFIG, "nodes", "list", "--json").stdout)
    assert rows == []


def test_bad_usage_exits_2_with_one_line(db: str) -> None:
    missing = run_cli("--db", db, "--config", CONFIG, "nodes", "show", "nope")
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        == "clustermgr: error: no node named 'nope' (see `clustermgr nodes list`)"
    )
    since = run_cli("--db", db, "--config", CONFIG, "events", "--since", "yesterday-ish")
    assert since.returncode == 2 and "expected a duration like 15m" in since.stderr
    state = run_cli("--db", db, "--config", CONFIG, "nodes", "list", "--state", "bogus")
    assert state.returncode == 2 and "Invalid value for '--state'" in state.stderr
    noconf = run_cli("--db", db, "--config", "/nonexistent.toml", "templates", "list")
    assert noconf.returncode == 2 and "no such config file" in noconf.stderr


def test_events_since_and_listings(db: str) -> None:
    assert run_cli("--db", db, "--config", CONFIG, "nodes", "sync", "--no-slurm").returncode == 0
    rows = json.loads(
        run_cli("--db", db, "--config", CONFIG, "events", "--since", "10m", "--json").stdout
    )
    assert len(rows) == 32 and rows[0]["new_state"] == "POWERED_DOWN"
    none = json.loads(
        run_cli("--db", db, "--config", CONFIG, "events", "--since", "2099-01-01", "--json").stdout
    )
    assert none == []
    templates = json.loads(run_cli("--config", CONFIG, "templates", "list", "--json").stdout)
    assert {t["name"] for t in templates} == {"aws-a100", "azure-a100", "os-v100", "local-gpu"}
    providers = run_cli("--config", CONFIG, "providers", "list", "--json").stdout
    assert "azure.secret" not in providers  # the source is shown, never paths or values
    assert {p["credentials"] for p in json.loads(providers)} >= {"chain", "client_secret_file"}


def test_config_check_and_completion() -> None:
    ok = run_cli("--config", CONFIG, "config", "check", "--no-slurm")
    assert ok.returncode == 0 and "OK (4 providers, 4 templates, 32 cloud node slots)" in ok.stdout
    completion = run_cli("completion", "bash")
    assert "_CLUSTERMGR_COMPLETE" in completion.stdout


def test_nodes_list_reads_the_database_url_from_the_config(db: str, tmp_path: Path) -> None:
    """`nodes list` takes a plain [database] table without pydantic; anything unusual there is
    still reported by full validation. Like with --db, other sections are not validated."""
    assert run_cli("--db", db, "--config", CONFIG, "nodes", "sync", "--no-slurm").returncode == 0
    example = EXAMPLE_CONFIG.read_text()

    def with_database(text: str, timeout: int) -> str:
        text = text.replace("[database]\n", f'[database]\nurl = "{db}"\n', 1)
        return text.replace("\nbusy_timeout_s = 30\n", f"\nbusy_timeout_s = {timeout}\n", 1)

    config = tmp_path / "with-db.toml"
    config.write_text(with_database(example, 5))
    code = (
        "import sys\nfrom clustermgr.cli.main import main\n"
        f"try:\n    main(['--config', {str(config)!r}, 'nodes', 'list', '--json'])\n"
        "except SystemExit as exc:\n    print('EXIT', exc.code, 'pydantic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines()[-1] == "EXIT 0 False", done.stderr
    assert len(json.loads(done.stdout.splitlines()[0])) == 32
    bad = tmp_path / "bad-db.toml"
    bad.write_text(with_database(example, 0))
    refused = run_cli("--config", str(bad), "nodes", "list", "--json")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"clustermgr: error: {bad}: database.busy_timeout_s: Input should be greater than 0 (got 0)"
    )
    other = tmp_path / "bad-template.toml"
    other.write_text(with_database(example.replace("cpus = 96", "cpus = -1", 1), 30))
    assert len(json.loads(run_cli("--config", str(other), "nodes", "list", "--json").stdout)) == 32


def chain_config(tmp_path: Path, chain: str) -> str:
    """The example config with its [policy] chain replaced (the table stays where it is)."""
    text = EXAMPLE_CONFIG.read_text()
    start = text.index("\n[policy]")
    end = text.index("\n[", start + 1)
    path = tmp_path / "chain.toml"
    path.write_text(text[:start] + f"\n[policy]\nchain = {chain}\n" + text[end:])
    return str(path)


def test_config_check_loads_the_policy_chain(tmp_path: Path) -> None:
    ok = run_cli(
        "--config",
        chain_config(tmp_path, '[{ name = "queue_depth" }]'),
        "config",
        "check",
        "--no-slurm",
    )
    assert ok.returncode == 0 and "policy chain: queue_depth: every policy loads" in ok.stdout
    broken = tmp_path / "broken.py"
    broken.write_text("class Broken:\n    name = 'broken'\n    def decide(self, view)\n")
    cases = {
        f'[{{ name = "broken", path = "{broken}" }}]': (
            f"policy 'broken': {broken}:3: invalid Python"
        ),
        '[{ name = "no_such_policy" }]': "policy 'no_such_policy': not built in",
        '[{ name = "idle_timeout", options = { hours = 2 } }]': (
            "policy 'idle_timeout': unknown option(s) hours; its options: minutes, margin_s"
        ),
    }
    for chain, first_line in cases.items():
        done = run_cli("--config", chain_config(tmp_path, chain), "config", "check", "--no-slurm")
        assert done.returncode == 2, (chain, done.stdout, done.stderr)
        assert done.stderr.startswith(f"clustermgr: error: {first_line}"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "OK" not in done.stdout


def test_looking_at_templates_never_creates_a_database(tmp_path: Path) -> None:
    text = EXAMPLE_CONFIG.read_text()
    start = text.index("\n[database]")
    end = text.index("\n[", start + 1)
    config = tmp_path / "fresh.toml"
    fresh = f'\n[database]\nurl = "sqlite:///{tmp_path / "new" / "cm.db"}"\n'
    config.write_text(text[:start] + fresh + text[end:])
    listed = run_cli("--config", str(config), "templates", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {t["failures_in_a_row"] for t in json.loads(listed.stdout)} == {None}
    assert not (tmp_path / "new").exists()  # no empty SQLite file, not even its directory


def test_config_check_warns_about_secret_files_others_can_read(tmp_path: Path) -> None:
    secret = tmp_path / "azure.secret"
    secret.write_text("not-a-real-secret-4b7c\n")
    secret.chmod(0o644)
    text = EXAMPLE_CONFIG.read_text().replace("/etc/clustermgr/azure.secret", str(secret))
    start = text.index("\n[database]")
    end = text.index("\n[", start + 1)
    password_url = '\n[database]\nurl = "postgresql+psycopg://cm:hunter2-pw@db.example/cm"\n'
    config = tmp_path / "clustermgr.toml"
    config.write_text(text[:start] + password_url + text[end:])
    config.chmod(0o644)
    done = run_cli("--config", str(config), "config", "check", "--no-slurm")
    assert done.returncode == 0, done.stderr
    warnings = done.stderr.strip().splitlines()
    # the config is the hooks' (SlurmUser's) to read: the advice is to move the password out
    assert f"warning: {config} holds the database password (database.url)" in warnings[0]
    assert 'set [database] password_file = "/etc/clustermgr/db.password"' in warnings[0]
    assert "chmod 600" not in warnings[0]
    assert any(w.startswith(f"warning: {secret} holds provider") for w in warnings), warnings
    assert "hunter2" not in done.stdout + done.stderr
    assert "not-a-real-secret" not in done.stdout + done.stderr
    password = tmp_path / "db.password"
    password.write_text("hunter2-pw\n")
    password.chmod(0o600)
    moved = '\n[database]\nurl = "postgresql+psycopg://cm@db.example/cm"\n'
    moved += f'password_file = "{password}"\n'
    secret.chmod(0o600)
    readable = Path(tempfile.mkdtemp(prefix="cm-config-", dir="/tmp"))  # SlurmUser may enter
    try:
        readable.chmod(0o755)
        shared = readable / "clustermgr.toml"  # 0644: readable by the hooks, holds no secret
        shared.write_text(text[:start] + moved + text[end:])
        shared.chmod(0o644)
        quiet = run_cli("--config", str(shared), "config", "check", "--no-slurm")
    finally:
        shutil.rmtree(readable)
    assert quiet.returncode == 0
    noisy = [line for line in quiet.stderr.splitlines() if str(tmp_path) in line]
    noisy += [line for line in quiet.stderr.splitlines() if str(readable) in line]
    assert not noisy, quiet.stderr

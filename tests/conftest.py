"""Shared fixtures. Tests under tests/unit, tests/integration and tests/e2e get the
matching marker automatically, so `pytest -m unit` runs the fast ones in seconds."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = REPO / "etc" / "clustermgr.toml.example"
PG_ADMIN_URL = os.environ.get(
    "CLUSTERMGR_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO).parts
        if len(parts) > 1 and parts[0] == "tests" and parts[1] in ("unit", "integration", "e2e"):
            item.add_marker(getattr(pytest.mark, parts[1]))


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> CliResult:
    """Run the real `clustermgr` entry point in a child process."""
    full_env = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "clustermgr", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'clustermgr.db'}"


def _pg_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=postgres", connect_timeout=3
        ):
            return True
    except Exception:
        return False


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database on the local server, dropped afterwards."""
    import psycopg

    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not reachable on 127.0.0.1:5432 (CI needs it)")
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    name = f"cmtest_{uuid.uuid4().hex[:12]}"
    admin = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'clustermgr.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url

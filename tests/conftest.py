"""Shared fixtures. Tests under tests/unit, tests/integration and tests/e2e get the
matching marker automatically, so `pytest -m unit` runs the fast ones in seconds; tests
under tests/chaos (the crash campaign: whole bursts against a real slurmctld) get both
`chaos` and `e2e`, so `-m "not e2e"` still leaves every Slurm burst out and `-m chaos`
runs the campaign alone."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.db.database import Database
from tests.services import postgres
from tests.services.postgres import PrivatePostgres

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = REPO / "etc" / "clustermgr.toml.example"


# Under pytest-xdist (`make test` runs `-n 2`) the scheduler below keeps a file's tests on
# one worker (module fixtures build one lab), and files that share something fixed on this
# machine in one group, so they never run at once: the cloud fakes' networks (bridges for
# 10.0.0.0/16, 10.20.0.0/16, 172.31.0.0/16: a cloud lab, benches' too, outside this group
# fails at its start, tests/labs/cloudlab.py claim_network), BurstLab's default subnet, the
# local contract harness's subnet (a file's teardown removes its bridge). munged is shared
# by refcount (tests/labs/slurmlab.py); everything else a test starts takes a free port.
# (xdist's own `loadgroup` cannot do this with pytest 9.2: it extends node ids, which 9.2
# no longer reads.)
SHARED_GROUPS = {
    "cloud-networks": (
        "tests/e2e/test_clouds.py",
        "tests/e2e/test_odd_queue.py",
        "tests/e2e/test_faults.py",
        "tests/e2e/test_takeover.py",
        "tests/e2e/test_database_down.py",
        "tests/chaos/test_campaign.py",
        "tests/e2e/test_burst_bench.py",
        # the real-Nova layer bursts through the same lab networks (its test_burst.py is
        # test_clouds.py's burst); collected after the e2e files, so its minutes of bring-up
        # run at the end of this group, not beside the timing-sensitive fault tests
        "tests/realnova/test_contract.py",
        "tests/realnova/test_burst.py",
        "tests/realnova/test_glance_copy.py",  # no lab network, but the same plane
        "tests/realnova/test_multicreate.py",  # the same plane: one bring-up, not two
        "tests/realnova/test_network_exhaustion.py",  # the same plane
    ),
    "burstlab-default-subnet": ("tests/e2e/test_local_burst.py", "tests/e2e/test_cmsub.py"),
    "munge-key-subnet": ("tests/security/test_munge_key.py",),  # 10.213.191.0/24, cm-mkprobe
    "local-harness-subnet": (
        "tests/integration/test_provider_contract.py",
        "tests/integration/test_local_provider.py",
    ),
}
GROUP_OF = {path: group for group, paths in SHARED_GROUPS.items() for path in paths}
# the slow groups start first, so no long file is left for the end of the run
SLOW_FIRST = (
    "cloud-networks",
    "burstlab-default-subnet",
    "tests/e2e/",
    "tests/security/",
    "tests/integration/",
)


def group_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return GROUP_OF.get(path, path)


def _start_rank(nodeid: str) -> int:
    group = group_of(nodeid)
    return next((i for i, prefix in enumerate(SLOW_FIRST) if group.startswith(prefix)), 99)


@pytest.hookimpl(optionalhook=True)  # a run without xdist (-p no:xdist) knows no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Scopes are the groups above (a file, or the files that share a fixed network)."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedResourceScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return SharedResourceScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO).parts
        layer = parts[1] if len(parts) > 1 and parts[0] == "tests" else ""
        if layer in ("unit", "integration", "e2e", "security", "realnova"):
            item.add_marker(getattr(pytest.mark, layer))
        if len(parts) > 1 and parts[0] == "tests" and parts[1] == "chaos":
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: _start_rank(item.nodeid))  # stable: file order kept within


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


def run_bench_quick(script: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`bench/SCRIPT --quick` as a user runs it, from `cwd`, its output captured."""
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--quick"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'clustermgr.db'}"


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    """A migrated SQLite database in the test's directory."""
    database = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    database.upgrade()
    yield database
    database.dispose()


def cannot_run(why: str) -> None:
    """A layer that cannot run here: skipped on a developer's machine, a failure in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI runs every layer)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PrivatePostgres]:
    """The tests' own PostgreSQL server, started once per session, stopped by pid."""
    try:
        server = postgres.start()
    except postgres.PostgresUnavailable as exc:
        cannot_run(f"PostgreSQL: {exc}")
        raise
    try:
        yield server
    finally:
        postgres.stop(server)


@pytest.fixture
def postgres_dsn(postgres_server: PrivatePostgres) -> Iterator[str]:
    """A fresh database on the tests' server (libpq form), dropped afterwards."""
    import psycopg

    name = f"cmtest_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.dsn(name)
    finally:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_dsn: str, postgres_server: PrivatePostgres) -> str:
    """The same fresh database as a SQLAlchemy URL."""
    return postgres_server.url(postgres_dsn.rsplit("dbname=", 1)[1])


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'clustermgr.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test is a layer that did not run: the run fails. (Judged once, by
    the xdist controller, which sees every worker's reports.)"""
    if not os.environ.get("CI") or exitstatus != 0 or hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        names = ", ".join(sorted({str(r.nodeid) for r in skipped})[:10])
        reporter.write_line(f"CI: {len(skipped)} tests skipped, every layer must run: {names}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

"""PostgreSQL down and back under a running cm-scale (docs/reliability.md, fault table):
a server of the test's own (stopped and restarted by pid on the same port and data), the
AWS SDK over moto, a real slurmctld and real slurmd behind every instance.

The leader cannot renew its lease with the server gone, so it stands by: it acts on
nothing (no launch it could not record, which a restart would then not know of), says
`leader lease: database not reachable: …` in one line a try, and keeps running; once the
server is back it takes the lease again, the job submitted meanwhile bursts and runs, and
the idle node is stopped: one instance in all."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cannot_run
from tests.labs.cloudlab import LabOptions, cloud_lab
from tests.services import postgres
from tests.services.postgres import PrivatePostgres

INTERVAL_S = 2.0


@pytest.fixture
def own_postgres() -> Iterator[list[PrivatePostgres]]:
    """A server this test may stop; the list holds the running one (restart replaces it)."""
    try:
        servers = [postgres.start()]
    except postgres.PostgresUnavailable as exc:
        cannot_run(f"PostgreSQL: {exc}")
        raise
    try:
        yield servers
    finally:
        postgres.stop(servers[-1])


def test_postgres_down_and_back_is_one_line_a_cycle_and_the_burst_resumes(
    lab_dir: Path, own_postgres: list[PrivatePostgres]
) -> None:
    server = own_postgres[0]
    options = LabOptions(interval_s=INTERVAL_S, database={"url": server.url()})
    with cloud_lab(lab_dir, "aws", options) as lab, lab.daemon() as daemon:
        log_path = lab.workdir / "cm-scale.log"
        lab.wait("a first cycle", lambda: " cycle: " in log_path.read_text(), 30)
        postgres.stop(server, keep=True)
        offset = len(log_path.read_text())

        def log() -> str:
            return log_path.read_text(errors="replace")[offset:]

        job = lab.submit("--wrap", "sleep 1")
        lab.wait(
            "two tries that find the database away",
            lambda: log().count("database not reachable") >= 2,
            60,
        )
        assert daemon.poll() is None
        assert lab.instances() == []  # nothing launched it could not record
        assert lab.job(job, "JobState") == "PENDING"
        own_postgres.append(postgres.restart(server))
        lab.wait("the job to complete", lambda: lab.job(job, "JobState") == "COMPLETED", 180)
        lab.wait("the idle node's instance terminated", lambda: lab.instances() == [], 120)
        assert daemon.poll() is None
        text = log()
        assert "Traceback" not in text, text[-3000:]
        down = [line for line in text.splitlines() if "database not reachable" in line]
        assert all(len(line) < 400 for line in down), down[:3]
        status = json.loads(lab.clustermgr("status", "--json", check=False).stdout)
        assert status["instances_launched"] == 1, status

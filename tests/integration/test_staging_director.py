"""`{director}` in a staging region's rsync_target: the region's director's address while
it is READY, a clear refusal otherwise; a stage-in through it reaches the rsync daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.core.errors import StagingError
from clustermgr.db.database import Database
from clustermgr.db.models import Provider
from clustermgr.directors.states import DirectorState, ensure
from clustermgr.staging.checks import StageIn
from clustermgr.staging.director import resolve
from clustermgr.staging.progress import Quiet
from clustermgr.staging.run import move_rsync
from tests.labs.rsyncd import RsyncDaemon


def settings(port: int) -> Settings:
    return parse_settings(
        {
            "providers": [{"name": "lab", "type": "local", "region": "here"}],
            "staging": {
                "regions": [
                    {
                        "provider": "lab",
                        "partition": "cloud",
                        "rsync_target": f"rsync://{{director}}:{port}/clustermgr-staging",
                        "node_root": "/staging",
                        "rsyncd_secrets": "/nonexistent/rsyncd.secrets",
                    }
                ]
            },
        }
    )


def test_the_director_address_while_ready(tmp_path: Path, sqlite_url: str) -> None:
    database = Database(sqlite_url)
    database.upgrade()
    with RsyncDaemon(tmp_path / "director", module="clustermgr-staging") as daemon:
        config = settings(daemon.port)
        area = f"rsync://{{director}}:{daemon.port}/clustermgr-staging/alice/s1"
        with pytest.raises(StagingError, match="director director-lab-here is not launched"):
            resolve(config, database, area)
        with database.session() as session:
            session.add(Provider(name="lab", type="local", region="here", credentials_source="-"))
            session.flush()
            director = ensure(session, "lab", "here", actor="test")
            director.private_address = "127.0.0.1"
        with pytest.raises(StagingError, match="is stopped: its staging area is not reachable"):
            resolve(config, database, area)
        with database.session() as session:
            for row in session.query(type(director)).all():
                row.state = DirectorState.READY.value  # as the lifecycle leaves it
        resolved = resolve(config, database, area)
        assert resolved == f"rsync://127.0.0.1:{daemon.port}/clustermgr-staging/alice/s1"
        src = tmp_path / "data.bin"
        src.write_bytes(b"x" * 1000)
        move_rsync("in", resolved, [StageIn(src, "in/data.bin", False)], [], Quiet())
        assert (daemon.root / "alice" / "s1" / "in" / "data.bin").read_bytes() == b"x" * 1000
    database.dispose()

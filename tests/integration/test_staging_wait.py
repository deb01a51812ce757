"""A transfer whose region's director is not READY waits for it instead of failing: its
row is `waiting` with the reason (`cmsub --status`, `clustermgr transfers list`), its region
is demand for the director lifecycle, and once the director is READY the transfer runs
through it (a real `rsync --daemon` playing the director's staging module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from clustermgr.config import load_settings
from clustermgr.db.engine import Database
from clustermgr.db.models import Provider
from clustermgr.directors.state import DirectorState, ensure
from clustermgr.staging.director import staging_demand
from clustermgr.staging.service import StagingService
from tests.conftest import REPO
from tests.integration.test_cmsub import FAKE_SLURM
from tests.labs.rsyncd import RsyncDaemon

BIN = Path(sys.executable).parent


def test_a_stage_in_waits_for_its_director_and_then_runs_through_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "scontrol", "scancel"):
        (bin_dir / tool).write_text(FAKE_SLURM.format(python=sys.executable))
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "run").mkdir(mode=0o755)
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(10_000))
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    with RsyncDaemon(tmp_path / "director", module="clustermgr-staging") as daemon:
        config = tmp_path / "clustermgr.toml"
        config.write_text(
            f'[database]\nurl = "sqlite:///{tmp_path}/cm.db"\n'
            f'[slurm]\nbin_dir = "{bin_dir}"\n'
            '[[providers]]\nname = "lab"\ntype = "local"\nregion = "here"\n'
            f'[staging]\ndata_mover_partition = "movers"\nsocket = "{tmp_path}/run/cm.sock"\n'
            f'transfer_command = "{BIN / "cmsub-transfer"}"\ndirector_poll_s = 0.2\n'
            '[[staging.regions]]\nprovider = "lab"\npartition = "cloud"\n'
            f'rsync_target = "rsync://{{director}}:{daemon.port}/clustermgr-staging"\n'
            'node_root = "/staging"\n'
        )
        env = {**os.environ, "CLUSTERMGR_CONFIG": str(config), "PYTHONPATH": str(REPO)}
        env.pop("CLUSTERMGR_DB", None)
        settings = load_settings(config)
        database = Database(str(settings.database.url))
        database.upgrade()
        with database.session() as session:
            session.add(Provider(name="lab", type="local", region="here", credentials_source="-"))
            session.flush()
            ensure(session, "lab", "here", actor="test").private_address = "127.0.0.1"
        service = StagingService(settings, database)
        service.start()
        mover: subprocess.Popen[str] | None = None
        try:

            def run(*argv: str) -> subprocess.CompletedProcess[str]:
                done = subprocess.run(
                    [str(BIN / argv[0]), *argv[1:]],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                assert done.returncode == 0, done.stderr
                return done

            chain = json.loads(run("cmsub", "--stage-in", f"{data}:in", "--json", "job.sh").stdout)
            calls = (bin_dir / "calls.log").read_text().splitlines()
            transfer_in = eval(calls[0])[-1]  # noqa: S307 (the stand-in's own repr)
            mover = subprocess.Popen(
                [str(BIN / "cmsub-transfer"), transfer_in],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.monotonic() + 30
            rows: list[dict[str, object]] = []
            while time.monotonic() < deadline:
                status = run("cmsub", "--status", str(chain["job"]), "--json")
                rows = json.loads(status.stdout)["transfers"]
                if rows[0]["state"] == "waiting":
                    break
                time.sleep(0.2)
            assert rows[0]["state"] == "waiting", rows
            assert "waiting for director director-lab-here (stopped)" in str(rows[0]["error"])
            listed = json.loads(run("clustermgr", "transfers", "list", "--json").stdout)
            assert [r["state"] for r in listed if r["direction"] == "in"] == ["waiting"]
            assert staging_demand(settings, database) == {"lab"}  # the lifecycle's demand
            assert mover.poll() is None  # still waiting, not failed

            with database.session() as session:
                director = ensure(session, "lab", "here", actor="test")
                director.state = DirectorState.READY.value  # as the lifecycle leaves it
            out, err = mover.communicate(timeout=60)
            assert mover.returncode == 0, err
            assert "waiting for director director-lab-here" in out and "all verified" in out
            staged = daemon.root / str(chain["stage_dir"]).removeprefix("/staging/") / "in"
            assert staged.read_bytes() == data.read_bytes()
            status = run("cmsub", "--status", str(chain["job"]), "--json")
            assert json.loads(status.stdout)["transfers"][0]["state"] == "done"
            assert staging_demand(settings, database) == set()
        finally:
            if mover is not None and mover.poll() is None:
                mover.kill()
                mover.wait()
            service.stop()
            database.dispose()

"""`config check` catches what a README install can get wrong before Slurm or a user meets it:
a provider whose SDK the install lacks, and a transfer command that is not there (issue 34
items 1 and 7). The hooks Slurm cannot run are in tests/unit/test_slurmconf.py and, against a
real slurmctld, tests/integration/test_slurm_sync_check.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_CONFIG, run_cli

pytestmark = pytest.mark.integration


def test_a_provider_whose_sdk_is_not_installed_fails_the_check_naming_the_extra() -> None:
    """The unedited example names azure and openstack providers: an install of
    `clustermgr[aws]` alone must not be told OK. The azure SDK is made absent the way a
    missing distribution is (the import finds nothing); the rest runs as installed."""
    absent = (
        "import sys\n"
        "sys.modules['azure'] = None\n"
        "from clustermgr.cli.main import main\n"
        f"sys.argv = ['clustermgr', '--config', {str(EXAMPLE_CONFIG)!r}, 'config', 'check', "
        "'--no-slurm']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", absent], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("clustermgr: error: provider type 'azure' needs the Python package")
    assert last.endswith(": pip install 'clustermgr[azure]'")
    assert "OK" not in done.stdout


def test_a_transfer_command_that_is_not_there_fails_the_check(tmp_path: Path) -> None:
    config = tmp_path / "clustermgr.toml"
    config.write_text(
        EXAMPLE_CONFIG.read_text().replace(
            "[staging]\n", '[staging]\ntransfer_command = "/usr/local/bin/cmsub-transfer"\n', 1
        )
    )
    done = run_cli("--config", str(config), "config", "check", "--no-slurm")
    assert done.returncode == 2
    assert (
        "staging: transfer_command /usr/local/bin/cmsub-transfer is not an executable file: "
        "set [staging] transfer_command to this install's cmsub-transfer (the default)"
    ) in done.stdout.splitlines()
    default = run_cli("--config", str(EXAMPLE_CONFIG), "config", "check", "--no-slurm")
    assert default.returncode == 0, default.stdout + default.stderr

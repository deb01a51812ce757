"""The shipped systemd unit and Slurm snippets are valid as installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from clustermgr.config import load_settings
from clustermgr.workload.slurmconf import render_slurm_conf
from tests.conftest import EXAMPLE_CONFIG, REPO, cannot_run


def verify_unit(unit: str, tmp_path: Path) -> None:
    """`systemd-analyze verify` passes the unit, its ExecStart pointed at this installation's
    cm-scale (verify checks that the program exists)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        cannot_run("systemd-analyze is not installed")
    local = unit.replace("/usr/local/bin/cm-scale", str(Path(sys.executable).with_name("cm-scale")))
    path = tmp_path / "cm-scale.service"
    path.write_text(local)
    done = subprocess.run(
        [analyze, "verify", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    problems = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if "cm-scale.service" in line and "Documentation" not in line
    ]
    assert done.returncode == 0 and not problems, done.stdout + done.stderr


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    unit = (REPO / "etc" / "systemd" / "cm-scale.service").read_text()
    assert "Type=notify" in unit and "WatchdogSec=" in unit and "ProtectSystem=strict" in unit
    verify_unit(unit, tmp_path)


def test_the_units_credential_line_verifies_and_names_the_documented_file(
    tmp_path: Path,
) -> None:
    """The commented LoadCredential= line (docs/security.md, "The database password") is a
    valid unit setting once uncommented, naming the file and credential the docs give."""
    unit = (REPO / "etc" / "systemd" / "cm-scale.service").read_text()
    line = "#LoadCredential=db-password:/etc/clustermgr/db.password\n"
    assert line in unit
    verify_unit(unit.replace(line, line[1:]), tmp_path)


def test_slurm_example_is_what_slurm_conf_prints(tmp_path: Path) -> None:
    """The shipped snippet is what `slurm conf` prints for the example config installed in
    a virtualenv at /opt/clustermgr (the README's install), whose hooks live there."""
    shipped = (REPO / "etc" / "slurm" / "clustermgr-cloud.conf").read_text()
    commented = '# hook_path = "/opt/clustermgr/bin/clustermgr"'
    assert commented in EXAMPLE_CONFIG.read_text()
    config = tmp_path / "opt.toml"
    config.write_text(EXAMPLE_CONFIG.read_text().replace(commented, commented[2:]))
    generated = "\n".join(render_slurm_conf(load_settings(config)))
    assert generated.strip() in shipped

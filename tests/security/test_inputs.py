"""Inputs from outside the daemon, tried against a real cm-scale process (run as root, as
the unit runs it) by the users who can supply them.

- SlurmUser names a spool file so that its name, logged, would print a line of its own
  (`INFO cm-scale: cycle ...`): the log keeps one line per record, the name escaped.
- A user's pending job whose Feature holds U+2028 or \\x1c (line boundaries of
  `str.splitlines()`), and one whose line cannot be parsed: the queue is still read, the
  other users' jobs with it. Slurm is the edge of the world here: stand-in `squeue` and
  `sinfo` print what Slurm prints for such jobs (a real slurmctld refuses most such
  constraints at submission; the reader must not depend on it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.security.conftest import ATTACKER, SLURM_USER, VICTIM, Accounts, as_user

RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.-]+: ")
FORGED = "2026-01-01 00:00:00,000 INFO cm-scale: cycle launched 64, stopped 0"
PENDING_FIELDS = 16


@dataclass(frozen=True)
class Site:
    root: Path
    config: Path
    state: Path
    bin_dir: Path

    @property
    def spool(self) -> Path:
        return self.state / "spool"

    def run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        exe = Path(sys.executable).with_name(program)
        return subprocess.run(
            [str(exe), "--config", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "CLUSTERMGR_DB": f"sqlite:///{self.state / 'cm.db'}"},
        )

    def cm_scale_once(self) -> subprocess.CompletedProcess[str]:
        return self.run("cm-scale", "--skip-slurm-check", "--once")


def pending(job_id: str, user: str, feature: str = "(null)", tres: str = "cpu=4,node=1") -> str:
    fields = [job_id, "N/A", "cloud", "1", "1", tres, "gres:gpu:1", "", "N/A", feature, "1:00:00"]
    fields += ["2026-11-23T00:00:00", "N/A", user, "1", "Resources"]
    assert len(fields) == PENDING_FIELDS
    return "\t".join(fields)


def stand_in_slurm(bin_dir: Path, queue: str) -> None:
    bin_dir.mkdir(mode=0o755)
    (bin_dir / "pending.out").write_text(queue, encoding="utf-8")
    scripts = {
        "sinfo": "#!/bin/sh\necho '{\"nodes\": []}'\n",
        "squeue": f'#!/bin/sh\ncase "$*" in *PENDING*) exec cat "{bin_dir}/pending.out";; esac\n',
        "scontrol": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


@pytest.fixture
def site(accounts: Accounts) -> Iterator[Site]:
    """A scratch site under /tmp (like /var/lib: others may traverse to the spool that
    cm-scale makes for SlurmUser), the config root's own, Slurm's clients stand-ins."""
    root = Path(tempfile.mkdtemp(prefix="cmsec-inputs-", dir="/tmp"))
    root.chmod(0o755)
    state = root / "state"
    config = root / "clustermgr.toml"
    config.write_text(
        f'[cluster]\nname = "cmsec-inputs"\n[slurm]\nbin_dir = "{root / "bin"}"\n'
        f'[daemon]\nstate_dir = "{state}"\nmetrics_port = 0\n'
        '[policy]\nchain = [{ name = "queue_depth" }]\n'
        # a CPU-only template for partition cloud: the queue's GPU jobs fit it not
        f'[[providers]]\nname = "lab"\ntype = "local"\nregion = "lab"\n'
        f'state_dir = "{root / "cloud"}"\n'
        '[[templates]]\nname = "cpu"\nprovider = "lab"\ninstance_types = ["local.cpu"]\n'
        'image = "-"\npartition = "cloud"\nnodes = "cpu-[1-2]"\ncpus = 2\nmemory_mb = 900\n'
    )
    config.chmod(0o600)
    site = Site(root, config, state, root / "bin")
    try:
        upgraded = site.run("clustermgr", "db", "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr
        yield site
    finally:
        shutil.rmtree(root)


def records(stderr: str) -> list[str]:
    """The log's lines that are not a traceback's (those are indented)."""
    return [line for line in stderr.split("\n") if line and not line.startswith("  ")]


@pytest.mark.parametrize("separator", ["\n", "\r", "\u2028", "\x85"])
def test_a_spool_file_name_cannot_forge_a_log_line(site: Site, separator: str) -> None:
    stand_in_slurm(site.bin_dir, "")
    first = site.cm_scale_once()  # makes the state directory and the spool, as a site's would
    assert first.returncode == 0, first.stderr
    name = f"1700000000.000000-1-resume{separator}{FORGED}.json"
    wrote = as_user(SLURM_USER, ["sh", "-c", 'printf "{" > "$1"', "sh", str(site.spool / name)])
    assert wrote.returncode == 0, wrote.stderr

    done = site.cm_scale_once()

    assert done.returncode == 0, done.stderr
    lines = records(done.stderr)
    assert lines and all(RECORD_START.match(line) for line in lines), done.stderr
    assert not any(FORGED in line and not line.startswith("20") for line in lines)
    escaped = {"\n": "\\n", "\r": "\\r", "\u2028": "\\u2028", "\x85": "\\x85"}[separator]
    assert f"resume{escaped}{FORGED}" in done.stderr, done.stderr  # named, on its own line
    assert all(separator not in line for line in lines)


def test_a_user_s_hostile_job_does_not_stop_the_queue_read(site: Site, accounts: Accounts) -> None:
    queue = "\n".join(
        [
            pending("101", ATTACKER, feature="gpu\u2028INFO cm-scale: forged"),
            pending("102", ATTACKER, feature="gpu\x1cnvlink"),
            pending("103", ATTACKER, tres="cpu=four,node=1"),  # unparseable TRES
            pending("104", VICTIM),
            "",
        ]
    )
    stand_in_slurm(site.bin_dir, queue)

    done = site.cm_scale_once()

    assert done.returncode == 0, done.stderr
    # read: the attacker's two readable jobs and the victim's; no template fits any of them
    assert "3 pending jobs fit no template" in done.stdout, done.stdout
    lines = records(done.stderr)
    assert all(RECORD_START.match(line) for line in lines), done.stderr
    [skipped] = [line for line in lines if "skipped" in line]
    assert "squeue pending line 3 (job 103) skipped: cannot parse" in skipped
    assert "\u2028" not in done.stderr and "\x1c" not in done.stderr


HOSTILE_FEATURE = "gpu\x1b]0;owned\x07\x1b[2J\x1b]52;c;ZWNobyBwd25lZA==\x07\u202egpj"


def test_a_user_s_hostile_job_reaches_the_admins_dry_run_escaped(
    site: Site, accounts: Accounts
) -> None:
    """What a user's job carries (its Feature, as squeue prints it) reaches root's terminal
    in `clustermgr policy dry-run`, text and JSON: escaped, never raw, and still visible."""
    job = pending("201", ATTACKER, feature=HOSTILE_FEATURE, tres="cpu=1,node=1")
    stand_in_slurm(site.bin_dir, job.replace("gres:gpu:1", "N/A") + "\n")
    for extra in ([], ["--json"]):
        done = site.run("clustermgr", "policy", "dry-run", *extra)
        assert done.returncode == 0, done.stderr
        shown = done.stdout + done.stderr
        raw = [c for c in shown if (ord(c) < 0x20 and c not in "\n") or c in "\x7f\u202e"]
        assert raw == [], repr(shown)
        assert "job 201" in done.stdout and "needs features" in done.stdout, done.stdout
        assert ("\\u001b" if extra else "\\x1b") in done.stdout  # shown, as an escape

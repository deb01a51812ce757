"""What every burst node runs cannot be changed by a job: the images on a director's rsync
daemon, as the lab director serves them (providers/local/director.py), against
`cmsec-mallory` standing in for a job on a burst node (she reaches the director's address,
as every job does).

The daemon is a real `rsync --daemon` (root, loopback) with the lab director's modules:
the images read only (anonymous, chrooted, as nobody) and the head's push module
(`auth users = clustermgr:rw`, the secrets file cm-scale writes, root 0600). The head's
side is the real replication (`sync_all`), as cm-scale runs it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import Provider
from clustermgr.directors import push_auth, states
from clustermgr.imaging.replication import ReplicaState, sync_all
from tests.labs.rsyncd import RsyncDaemon
from tests.security.conftest import Account, Accounts, as_user

SECRET_FILE = "etc/node.secret"  # root 0600 in the image: never served to a node


@pytest.fixture
def director(tmp_path: Path) -> Iterator[tuple[Settings, RsyncDaemon, Database]]:
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "motd").write_text("hello from the image\n")
    (tree / SECRET_FILE).write_text("root only\n")
    (tree / SECRET_FILE).chmod(0o600)
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "node.tmpl").write_text("#cloud-config\n")
    (defs / "node.toml").write_text(f'name = "node"\ntree = "{tree}"\nuser_data = "node.tmpl"\n')
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o400)
    secrets = tmp_path / "images-push.secrets"
    root = tmp_path / "director" / "images"
    root.mkdir(parents=True)
    for where in (tmp_path, tmp_path / "director", root):
        where.chmod(0o755)  # nobody (the read-only module) must reach the tree
    db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    db.upgrade()
    with RsyncDaemon(root, push_secrets=secrets) as daemon:
        with db.session() as session:
            session.add(Provider(name="lab", type="local", region="lab", credentials_source="none"))
            session.flush()
            row = states.ensure(session, "lab", "lab", actor="test")
            row.state = states.DirectorState.READY.value
            row.private_address = "127.0.0.1"
        settings = parse_settings(
            {
                "daemon": {"state_dir": str(tmp_path / "state")},
                "slurm": {"munge_key_path": str(key)},
                "images": {
                    "definitions_dir": str(defs),
                    "rsync_port": daemon.port,
                    "rsync_module": daemon.module,
                    "push_secrets": str(secrets),
                },
            }
        )
        yield settings, daemon, db
    db.dispose()


def rsync_as(
    who: Account, *argv: str, password: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": who.home, "LC_ALL": "C"}
    if password is not None:
        env["RSYNC_PASSWORD"] = password
    return as_user(who.name, ["rsync", "--contimeout=10", *argv], env=env)


def test_a_job_reads_the_image_but_cannot_change_it(
    accounts: Accounts,
    director: tuple[Settings, RsyncDaemon, Database],
    mallory_dir: Path,
) -> None:
    settings, daemon, db = director
    report = sync_all(db, settings, machine_images=False)
    assert report.ok, report
    [replica] = report.replicas
    assert replica.state is ReplicaState.VERIFIED
    secrets = push_auth.secrets_path(settings)
    info = secrets.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)
    password = push_auth.push_password(Path(settings.slurm.munge_key_path)).reveal()

    mallory = accounts.attacker
    base = f"rsync://127.0.0.1:{daemon.port}"
    read = f"{base}/{daemon.module}/node"
    push = f"{base}/{daemon.module}-push/node"
    # what a node does: the image, world-readable files only
    got = rsync_as(mallory, f"{read}/etc/motd", str(mallory_dir / "motd"))
    assert got.returncode == 0, got.stderr
    assert (mallory_dir / "motd").read_text() == "hello from the image\n"
    hidden = rsync_as(mallory, f"{read}/{SECRET_FILE}", str(mallory_dir / "stolen"))
    assert hidden.returncode != 0 and not (mallory_dir / "stolen").exists()

    evil = mallory_dir / "motd"
    evil.write_text("owned\n")
    attempts = {
        "the read-only module": rsync_as(mallory, str(evil), f"{read}/etc/motd"),
        "the push module, no user": rsync_as(mallory, str(evil), f"{push}/etc/motd"),
        "the push module as clustermgr, no password": rsync_as(
            mallory,
            "--password-file=/dev/null",
            str(evil),
            f"rsync://clustermgr@{push[8:]}/etc/motd",
        ),
        "the push module, a guessed password": rsync_as(
            mallory, str(evil), f"rsync://clustermgr@{push[8:]}/etc/motd", password="clustermgr"
        ),
        "the push module as root": rsync_as(
            mallory, str(evil), f"rsync://root@{push[8:]}/etc/motd", password=password
        ),
    }
    for what, done in attempts.items():
        assert done.returncode != 0, f"{what}: {done.stdout} {done.stderr}"
    assert (daemon.root / "node" / "etc" / "motd").read_text() == "hello from the image\n"
    listed = rsync_as(mallory, f"{base}/")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [daemon.module]
    # the head's password is in no file mallory can read
    readable = as_user(mallory.name, ["cat", str(secrets)])
    assert readable.returncode != 0 and password not in readable.stdout

    again = sync_all(db, settings, machine_images=False)
    assert again.ok and again.replicas[0].state is ReplicaState.VERIFIED


def test_push_secrets_writes_the_file_a_cloud_director_bakes(
    accounts: Accounts, tmp_path: Path, mallory_dir: Path
) -> None:
    """`clustermgr images push-secrets FILE`: root only, root 0600, the password printed
    nowhere; a directory others may write is refused in one line, exit 2."""
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o400)
    config = tmp_path / "clustermgr.toml"
    config.write_text(f'[slurm]\nmunge_key_path = "{key}"\n')
    env = {**os.environ, "CLUSTERMGR_CONFIG": str(config)}
    out = tmp_path / "baked" / "images-push.secrets"
    out.parent.mkdir(mode=0o700)
    command = [sys.executable, "-m", "clustermgr", "images", "push-secrets"]

    done = subprocess.run([*command, str(out)], env=env, capture_output=True, text=True)

    assert done.returncode == 0, done.stderr
    password = push_auth.push_password(key).reveal()
    assert out.read_text() == f"clustermgr:{password}\n"
    info = out.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)
    assert password not in done.stdout + done.stderr
    loose = mallory_dir / "images-push.secrets"  # a directory mallory could swap files in
    refused = subprocess.run([*command, str(loose)], env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and not loose.exists()
    assert refused.stderr.count("\n") == 1 and "writable by no one else" in refused.stderr
    as_mallory = as_user(accounts.attacker.name, [*command, str(mallory_dir / "x")], env=env)
    assert as_mallory.returncode != 0 and not (mallory_dir / "x").exists()

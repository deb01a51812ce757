"""The munge key reaches a cloud director over ssh (directors/keypush.py), never in user
data: a real sshd on loopback plays the director; rsync runs as clustermgr runs it.

The pushed key is 0400 and owned by munge; the push is recorded per instance (no key
material) and the health check keeps the director out of READY until the current key is on
the current instance; a rotated key is pushed again; a host key that changes under the same
instance is refused in one line, while a new instance is trusted on first use."""

from __future__ import annotations

import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.db.engine import Database
from clustermgr.directors import keypush
from clustermgr.directors.health import DirectorInfo, PortsAndReplicas
from clustermgr.directors.lifecycle import launch_spec
from clustermgr.directors.state import DirectorState
from clustermgr.directors.syncing import DirectorSync
from clustermgr.directors.userdata import render_user_data
from clustermgr.errors import ConfigError
from tests.services.sshd import Sshd, SshdUnavailable, running_sshd

pytestmark = pytest.mark.integration

NAME = "director-aws-us-east-1"


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    try:
        with running_sshd(tmp_path / "sshd") as server:
            yield server
    except SshdUnavailable as exc:
        pytest.skip(str(exc))


def settings_for(tmp_path: Path, sshd: Sshd, key: Path, remote: Path) -> Settings:
    data: dict[str, Any] = {
        "cluster": {"name": "c"},
        "daemon": {"state_dir": str(tmp_path / "state")},
        "images": {"definitions_dir": str(tmp_path / "no-images")},
        "providers": [{"name": "aws", "type": "aws", "region": "us-east-1"}],
        "templates": [
            {
                "name": "t",
                "provider": "aws",
                "instance_types": ["m5.large"],
                "image": "ami-1",
                "partition": "cloud",
                "nodes": "n-[001-002]",
                "cpus": 2,
                "memory_mb": 1024,
            }
        ],
        "directors": [
            {
                "provider": "aws",
                "instance_type": "m5.large",
                "image": "ami-1",
                "health_ports": [sshd.port],
                "munge_key_file": str(key),
                "user_data_file": str(tmp_path / "director.tmpl"),
                "key_push": {
                    "identity_file": str(sshd.client_key),
                    "ssh_port": sshd.port,
                    "remote_path": str(remote),
                },
            }
        ],
    }
    (tmp_path / "no-images").mkdir(exist_ok=True)
    (tmp_path / "director.tmpl").write_text("#cloud-config\n# key at @{munge_key_file}\n")
    return parse_settings(data)


@pytest.fixture
def setup(tmp_path: Path, sshd: Sshd) -> tuple[Settings, Path, Path]:
    key = tmp_path / "head-munge.key"
    key.write_bytes(b"KEY-MATERIAL-" + bytes(range(256)) * 4)
    key.chmod(0o400)
    remote = tmp_path / "director-root" / "etc" / "munge.key"
    remote.parent.mkdir(parents=True)
    return settings_for(tmp_path, sshd, key, remote), key, remote


def info(instance_id: str) -> DirectorInfo:
    return DirectorInfo(
        1, NAME, "aws", "us-east-1", DirectorState.SYNCING, instance_id=instance_id,
        private_address="127.0.0.1",
    )  # fmt: skip


def test_the_key_lands_0400_munge_and_health_waits_for_it(
    tmp_path: Path, setup: tuple[Settings, Path, Path]
) -> None:
    settings, key, remote = setup
    spec = settings.directors[0]
    database = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    database.upgrade()
    health = PortsAndReplicas(settings, database)
    before = health.check(info("i-1"))
    assert before.reachable and not before.synced
    assert "munge key not pushed to this instance yet" in before.detail

    done = DirectorSync(settings, database).sync_director(info("i-1"))
    (line,) = [ln for ln in done.lines if "munge key" in ln]
    assert line == f"munge key pushed to root@127.0.0.1:{remote} (instance i-1)"
    assert not [f for f in done.failures if "munge" in f]  # (no director row: images fail)
    assert remote.read_bytes() == key.read_bytes()
    st = remote.stat()
    assert st.st_mode & 0o7777 == 0o400
    assert st.st_uid == pwd.getpwnam("munge").pw_uid
    assert health.check(info("i-1")).healthy
    assert not health.check(info("i-2")).synced  # a replacement instance needs its own push

    record = (keypush.director_dir(settings, NAME) / keypush.RECORD).read_bytes()
    assert b"KEY-MATERIAL" not in record
    user_data = render_user_data(settings, spec, NAME)
    assert "KEY-MATERIAL" not in user_data and "KEY-MATERIAL" not in str(launch_spec(spec, NAME))

    key.chmod(0o600)
    key.write_bytes(b"ROTATED-" + bytes(range(256)) * 4)  # a rotated key: out of sync again
    assert not health.check(info("i-1")).synced
    DirectorSync(settings, database).sync_director(info("i-1"))
    assert remote.read_bytes().startswith(b"ROTATED-")
    assert health.check(info("i-1")).healthy


def test_a_changed_host_key_is_refused_in_one_line_a_new_instance_trusted(
    setup: tuple[Settings, Path, Path], sshd: Sshd
) -> None:
    settings, key, remote = setup
    spec = settings.directors[0]
    first = keypush.plan(settings, spec, NAME, "i-1", "127.0.0.1")
    assert first is not None
    keypush.push(first, keypush.director_dir(settings, NAME))
    sshd.stop()
    sshd.new_host_key()  # another machine answers at the same address
    sshd.start()
    remote.unlink()
    with pytest.raises(keypush.KeyPushError) as caught:
        keypush.push(first, keypush.director_dir(settings, NAME))
    message = str(caught.value)
    assert "\n" not in message and "KEY-MATERIAL" not in message
    assert message.startswith(f"munge key to root@127.0.0.1:{remote}: rsync exited")
    assert "host key" in message.lower()
    assert not remote.exists()
    replacement = keypush.plan(settings, spec, NAME, "i-2", "127.0.0.1")
    assert replacement is not None
    keypush.push(replacement, keypush.director_dir(settings, NAME))
    assert remote.read_bytes() == key.read_bytes()


def test_key_push_is_refused_for_a_local_director_and_needs_a_key() -> None:
    base: dict[str, Any] = {
        "providers": [{"name": "lab", "type": "local", "region": "lab"}],
        "templates": [
            {
                "name": "t",
                "provider": "lab",
                "instance_types": ["local.cpu"],
                "image": "local",
                "partition": "cloud",
                "nodes": "n-[001-002]",
                "cpus": 2,
                "memory_mb": 1024,
            }
        ],
    }
    push = {"identity_file": "/root/.ssh/id_ed25519"}
    director = {"provider": "lab", "instance_type": "local.cpu", "image": "local"}
    with pytest.raises(ConfigError, match="key_push needs munge_key_file"):
        parse_settings({**base, "directors": [{**director, "key_push": push}]})
    local = {**director, "key_push": push, "munge_key_file": "/etc/munge/munge.key"}
    with pytest.raises(ConfigError, match="key_push is for cloud directors"):
        parse_settings({**base, "directors": [local]})

"""Per-user rsync daemon credentials: the URL carries the user, passwords derive from the
staging key, the secrets file holds a line per user (root 0600, atomically replaced), and
the password reaches rsync only through its environment."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from clustermgr.core.errors import StagingError
from clustermgr.staging import areas, rsync_transport, rsyncd_auth
from clustermgr.staging.rsyncd_auth import grant, password, staging_key

TARGET = "rsync://{director}:873/clustermgr-staging"


def test_a_daemon_area_is_the_module_reached_as_its_user() -> None:
    area = rsync_transport.area_of(TARGET, "alice", "s1")
    assert area == "rsync://alice@{director}:873/clustermgr-staging/s1"
    assert rsync_transport.area_of("/srv/st/", "alice", "s1") == "/srv/st/alice/s1"
    assert rsyncd_auth.with_user("rsync://bob@h/m", "alice") == "rsync://alice@h/m"
    assert rsyncd_auth.without_user(area) == "rsync://{director}:873/clustermgr-staging/s1"
    areas.check_inside(area, TARGET, "alice")
    for foreign in (
        "rsync://mallory@{director}:873/clustermgr-staging/s1",
        "rsync://alice@{director}:873/clustermgr-staging/../x",
        "rsync://alice@{director}:873/clustermgr-staging",
        "rsync://alice@other:873/clustermgr-staging/s1",
    ):
        with pytest.raises(StagingError):
            areas.check_inside(foreign, TARGET, "alice")


@pytest.mark.parametrize("user", ["root", "a:b", "a\nb", "a/b", "", "-x"])
def test_root_and_odd_names_get_no_daemon_area(user: str) -> None:
    with pytest.raises(StagingError):
        rsync_transport.area_of(TARGET, user, "s1")
    with pytest.raises(StagingError):
        password(b"k" * 32, user)


def test_every_head_derives_the_same_key_from_the_munge_key(tmp_path: Path) -> None:
    """Two heads (each its own state dir) hold the same munge key: the same staging key, so
    users' passwords survive a takeover; another cluster's munge key gives another."""
    munge = tmp_path / "munge.key"
    munge.write_bytes(os.urandom(1024))
    key = staging_key(munge)
    assert len(key) == 32 and staging_key(munge) == key
    assert password(key, "alice") != password(key, "bob")
    other = tmp_path / "other.key"
    other.write_bytes(os.urandom(1024))
    assert password(staging_key(other), "alice") != password(key, "alice")
    with pytest.raises(StagingError, match=r"cannot read the munge key .*missing"):
        staging_key(tmp_path / "missing")
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(StagingError, match="is empty"):
        staging_key(tmp_path / "empty")


def test_the_secrets_file_gets_a_line_per_user_root_0600(tmp_path: Path) -> None:
    key = os.urandom(32)
    secrets = tmp_path / "rsyncd.secrets"
    assert grant(secrets, key, "alice") == password(key, "alice")
    assert grant(secrets, key, "bob") == password(key, "bob")
    lines = secrets.read_text().splitlines()
    assert lines == [f"alice:{password(key, 'alice')}", f"bob:{password(key, 'bob')}"]
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    before = secrets.stat().st_ino
    grant(secrets, key, "alice")
    assert secrets.stat().st_ino == before  # nothing to change: not rewritten
    secrets.chmod(0o644)
    new_key = os.urandom(32)
    grant(secrets, new_key, "alice")  # a loose file, a new key: every line made again
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert f"bob:{password(new_key, 'bob')}" in secrets.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["rsyncd.secrets"]  # no scratch left


def test_a_secrets_file_in_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    with pytest.raises(StagingError, match="writable by no one else"):
        grant(tmp_path / "rsyncd.secrets", os.urandom(32), "alice")
    assert not (tmp_path / "rsyncd.secrets").exists()


def test_the_password_is_in_rsyncs_environment_only_while_it_runs() -> None:
    os.environ.pop(rsyncd_auth.PASSWORD_ENV, None)
    with rsyncd_auth.password_in_env("s3cret"):
        assert os.environ[rsyncd_auth.PASSWORD_ENV] == "s3cret"
    assert rsyncd_auth.PASSWORD_ENV not in os.environ
    with rsyncd_auth.password_in_env(""):
        assert rsyncd_auth.PASSWORD_ENV not in os.environ

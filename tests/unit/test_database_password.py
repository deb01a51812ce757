"""[database] password_file / password_credential: the password apart from the config file,
read by cm-scale and root's CLI only; config check's advice about where the password lives
and who must read the config."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest

from clustermgr.config import parse_settings
from clustermgr.config.dbpassword import read_database_password
from clustermgr.config.exposure import exposed_secret_files, slurm_user_cannot_read
from clustermgr.config.sections import DatabaseSettings
from clustermgr.core.errors import ConfigError
from clustermgr.core.secret import MASK

URL = "postgresql+psycopg://cm@db.example:5432/cm"
PASSWORD = "pw-7f3a-not-in-the-config"


def _password_file(tmp_path: Path, mode: int = 0o600, text: str = PASSWORD + "\n") -> Path:
    path = tmp_path / "db.password"
    path.write_text(text)
    path.chmod(mode)
    return path


def _database(**keys: object) -> dict[str, object]:
    return {"database": {"url": URL, **keys}}


def test_password_file_is_read_and_never_shows(tmp_path: Path) -> None:
    settings = parse_settings(_database(password_file=str(_password_file(tmp_path))))
    secret = read_database_password(settings.database, environ={})
    assert secret is not None and secret.reveal() == PASSWORD
    assert PASSWORD not in f"{secret} {secret!r} {settings!r} {settings.model_dump_json()}"
    assert str(secret) == MASK


def test_no_source_no_password() -> None:
    assert read_database_password(DatabaseSettings(url=URL), environ={}) is None


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"url": "postgresql+psycopg://cm:inline@db/cm", "password_file": "/etc/x"},
            "url carries a password and password_file/password_credential gives one too",
        ),
        ({"password_file": "db.password"}, "password_file: an absolute path"),
        ({"url": None, "password_file": "/etc/x"}, "set url (a PostgreSQL URL)"),
        ({"password_credential": "../db"}, "password_credential"),
    ],
)
def test_refused_in_one_line(keys: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_settings({"database": {"url": URL, **keys}})
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert "inline" not in str(refused.value)


def test_a_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = _password_file(tmp_path, 0o640)
    settings = parse_settings(_database(password_file=str(path)))
    with pytest.raises(ConfigError) as refused:
        read_database_password(settings.database, environ={})
    assert str(refused.value) == (
        f"[database] password_file {path} is readable by group or others (mode 0640): "
        f"chmod 600 {path}"
    )


@pytest.mark.parametrize(
    ("text", "why"), [("", "is empty"), ("\n\n", "is empty"), (None, "cannot read")]
)
def test_missing_or_empty_file(tmp_path: Path, text: str | None, why: str) -> None:
    path = tmp_path / "db.password" if text is None else _password_file(tmp_path, text=text)
    settings = parse_settings(_database(password_file=str(path)))
    with pytest.raises(ConfigError, match=why):
        read_database_password(settings.database, environ={})


def test_credential_from_the_units_directory(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    _password_file(credentials).rename(credentials / "db-password")
    settings = parse_settings(_database(password_credential="db-password"))
    secret = read_database_password(
        settings.database, environ={"CREDENTIALS_DIRECTORY": str(credentials)}
    )
    assert secret is not None and secret.reveal() == PASSWORD
    with pytest.raises(ConfigError, match=r"\$CREDENTIALS_DIRECTORY is not set"):
        read_database_password(settings.database, environ={})


def test_credential_with_the_file_for_roots_cli(tmp_path: Path) -> None:
    path = _password_file(tmp_path)
    both = parse_settings(_database(password_credential="db-password", password_file=str(path)))
    secret = read_database_password(both.database, environ={})  # no unit: the file
    assert secret is not None and secret.reveal() == PASSWORD


def test_password_in_the_url_gets_the_move_advice(tmp_path: Path) -> None:
    config = tmp_path / "clustermgr.toml"
    config.write_text("")
    config.chmod(0o600)
    settings = parse_settings({"database": {"url": "postgresql+psycopg://cm:hunter2@db/cm"}})
    warnings = exposed_secret_files(settings, config, environ={})
    advice = [w for w in warnings if "holds the database password" in w]
    assert len(advice) == 1
    assert "password_file" in advice[0] and "chmod 600" not in advice[0]
    assert "hunter2" not in "\n".join(warnings)


def _traversable(tmp_path: Path) -> Path:
    """A directory every user may enter (pytest's own base is 0700)."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="cm-pw-", dir="/tmp"))
    top.chmod(0o755)
    return top


def test_who_can_read_the_config(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    group = grp.getgrgid(nobody.pw_gid).gr_name
    top = _traversable(tmp_path)
    try:
        config = top / "clustermgr.toml"
        config.write_text("")
        config.chmod(0o600)
        reason = slurm_user_cannot_read(config, "nobody")
        assert reason is not None and "mode 0600" in reason
        if os.geteuid() == 0:
            os.chown(config, 0, nobody.pw_gid)
            config.chmod(0o640)
            assert slurm_user_cannot_read(config, "nobody") is None
        config.chmod(0o644)
        assert slurm_user_cannot_read(config, "nobody") is None
        top.chmod(0o700)
        assert f"directory {top}" in (slurm_user_cannot_read(config, "nobody") or "")
        settings = parse_settings({"slurm": {"user": "nobody"}})
        warned = exposed_secret_files(settings, config, environ={})
        assert any(
            "SlurmUser nobody cannot read it" in w and f"chown root:{group}" in w for w in warned
        ), warned
    finally:
        top.chmod(0o755)
        for child in top.iterdir():
            child.unlink()
        top.rmdir()

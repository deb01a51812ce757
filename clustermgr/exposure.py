"""Files that hold secrets and are readable by group or others: one warning line each.

The configuration holds no cloud secret (a provider names where its credentials come
from), but it may hold a database password in `database.url`; the files the credentials
come from (an Azure client secret, AWS shared credentials, an OpenStack clouds.yaml) do.
`clustermgr config check` prints these lines and cm-scale logs them when it starts.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from clustermgr.config import Settings

OPENSTACK_CLOUDS_FILES = (
    Path("~/.config/openstack/clouds.yaml"),
    Path("/etc/openstack/clouds.yaml"),
)


def exposed_secret_files(
    settings: Settings, config_path: Path, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """A warning per secret-holding file that group or others may read."""
    warnings = []
    for path, holds in _secret_files(settings, config_path, environ):
        try:
            mode = path.stat().st_mode
        except OSError:
            continue  # absent or unreadable to us: the provider's own check says so
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            warnings.append(
                f"warning: {path} holds {holds} and is readable by group or others "
                f"(mode {stat.S_IMODE(mode):04o}): chmod 600 {path}"
            )
    return warnings


def _secret_files(
    settings: Settings, config_path: Path, environ: Mapping[str, str]
) -> Iterator[tuple[Path, str]]:
    if _has_password(settings.database.url):
        yield config_path, "the database password (database.url)"
    for provider in settings.providers:
        creds = provider.credentials
        if creds.secret_file is not None:
            yield creds.secret_file, f"provider {provider.name}'s client secret"
        if provider.type == "aws" and creds.source in ("chain", "profile"):
            shared = environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")
            yield Path(shared).expanduser(), f"provider {provider.name}'s AWS keys"
        if provider.type == "openstack":
            named = environ.get("OS_CLIENT_CONFIG_FILE")
            for path in (Path(named),) if named else OPENSTACK_CLOUDS_FILES:
                yield path.expanduser(), f"provider {provider.name}'s OpenStack password"


def _has_password(url: str | None) -> bool:
    if not url:
        return False
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return bool(make_url(url).password)
    except ArgumentError:
        return False

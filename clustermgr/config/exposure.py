"""Files that hold secrets and are readable by group or others: one warning line each.

The configuration holds no cloud secret (a provider names where its credentials come
from), but it may hold a database password in `database.url`; the files the credentials
come from (an Azure client secret, and what each provider kind declares: AWS shared
credentials, an OpenStack clouds.yaml) do.
`clustermgr config check` prints these lines and cm-scale logs them when it starts.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from clustermgr.config import Settings
from clustermgr.core.kinds import kind_of


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
        own = kind_of(provider.type).secret_files  # the files its kind reads secrets from
        if own is not None:
            yield from own(provider, environ)


def _has_password(url: str | None) -> bool:
    if not url:
        return False
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return bool(make_url(url).password)
    except ArgumentError:
        return False

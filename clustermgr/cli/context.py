"""What every command shares: the settings and the database, each opened on first use."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clustermgr.config import Settings
    from clustermgr.core.secret import Secret
    from clustermgr.db.database import Database


@dataclass
class AppContext:
    config_path: str | None
    db_url: str | None
    debug: bool = False
    pool_size: int | None = None  # cm-scale's bounded pool (db/database.py)
    _settings: Settings | None = field(default=None, repr=False)
    _db: Database | None = field(default=None, repr=False)

    def settings(self) -> Settings:
        if self._settings is None:
            from clustermgr.cli.paths import config_path
            from clustermgr.config import load_settings

            self._settings = load_settings(config_path(self.config_path))
        return self._settings

    def settings_if_any(self) -> Settings | None:
        """The settings when a config file exists; None when none was given or found."""
        from clustermgr.cli.paths import config_path

        path = config_path(self.config_path)
        if self.config_path is None and not path.exists():
            return None
        return self.settings()

    def database(self, *, check_schema: bool = True, validate_config: bool = True) -> Database:
        """The database; `validate_config=False` (read-only listings) reads a plain [database]
        table without validating the rest of the config, as when --db gives the URL."""
        if self._db is None:
            from clustermgr.db.database import Database

            url, timeout, password = self._database_url(validate_config)
            if check_schema:
                _refuse_missing_sqlite(url)
            self._db = Database(url, timeout, self.pool_size, password)
        if check_schema:
            self._db.require_current_schema()
        return self._db

    def existing_database(self) -> Database | None:
        """The database for what only adds to a read-only answer (the cached catalog, failure
        counts): None while it is a SQLite file that does not exist, so a look never leaves
        an empty database (or its directory) behind."""
        if self._db is None:
            from pathlib import Path

            from sqlalchemy import make_url

            url, _, _ = self._database_url(validate_config=True)
            parsed = make_url(url)
            if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").exists():
                return None
        return self.database()

    def _database_url(self, validate_config: bool) -> tuple[str, float, Secret | None]:
        """The URL, the busy timeout, and the password when [database] keeps it apart (read
        only when the config's URL is the one used: --db and $CLUSTERMGR_DB carry their own)."""
        from clustermgr.db.database import resolve_db_url

        config_url, timeout, password = None, 30.0, None
        if not (self.db_url or os.environ.get("CLUSTERMGR_DB")) or self._settings:
            # the config is read only when it decides the URL (or is loaded anyway)
            plain = None if validate_config or self._settings else self._plain_database()
            if plain is not None:
                config_url, timeout = plain
            else:
                settings = self.settings_if_any()
                if settings is not None:
                    config_url = settings.database.url
                    timeout = settings.database.busy_timeout_s
        url = resolve_db_url(self.db_url, config_url)
        if config_url is not None and url == config_url and self._settings is not None:
            from clustermgr.config.dbpassword import read_database_password

            password = read_database_password(self._settings.database)
        return url, timeout, password

    def _plain_database(self) -> tuple[str | None, float] | None:
        """[database] url and busy_timeout_s straight from the TOML (no pydantic import, ~0.1 s)
        when they are plainly valid; None for anything else, which full validation reports."""
        import tomllib

        from clustermgr.cli.paths import config_path

        path = config_path(self.config_path)
        if self.config_path is None and not path.exists():
            return None
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8")).get("database", {})
        except (OSError, ValueError):
            return None
        numbers = ("busy_timeout_s", "retention_days", "prune_interval_s")
        if not isinstance(table, dict) or not set(table) <= {"url", *numbers}:
            return None
        url, timeout = table.get("url"), table.get("busy_timeout_s", 30.0)  # config.py defaults
        if url is not None and not isinstance(url, str):
            return None
        for key in numbers:  # each a positive number, else full validation says what is wrong
            value = table.get(key, 1.0)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                return None
        return url, float(timeout)

    def close(self) -> None:
        if self._db is not None:
            self._db.dispose()


def _refuse_missing_sqlite(url: str) -> None:
    """A command that needs the schema says a missing SQLite file has none, without creating
    it (an empty file, or its directory, left behind would look like a database)."""
    from pathlib import Path

    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    from clustermgr.core.errors import SchemaOutOfDateError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return  # make_engine names what is wrong with the URL
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return
    if database.startswith("file:") or Path(database).exists():
        return
    raise SchemaOutOfDateError(
        f"database {database} does not exist: run `clustermgr db upgrade` to create it"
    )

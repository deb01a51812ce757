"""What every command shares: the settings and the database, each opened on first use."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clustermgr.config import Settings
    from clustermgr.db.engine import Database


@dataclass
class AppContext:
    config_path: str | None
    db_url: str | None
    debug: bool = False
    _settings: Settings | None = field(default=None, repr=False)
    _db: Database | None = field(default=None, repr=False)

    def settings(self) -> Settings:
        if self._settings is None:
            from clustermgr.config import load_settings
            from clustermgr.paths import config_path

            self._settings = load_settings(config_path(self.config_path))
        return self._settings

    def settings_if_any(self) -> Settings | None:
        """The settings when a config file exists; None when none was given or found."""
        from clustermgr.paths import config_path

        path = config_path(self.config_path)
        if self.config_path is None and not path.exists():
            return None
        return self.settings()

    def database(self, *, check_schema: bool = True) -> Database:
        if self._db is None:
            from clustermgr.db.engine import Database, resolve_db_url

            config_url, timeout = None, 30.0
            if not (self.db_url or os.environ.get("CLUSTERMGR_DB")) or self._settings:
                # the config is read only when it decides the URL (or is loaded anyway)
                settings = self.settings_if_any()
                if settings is not None:
                    config_url = settings.database.url
                    timeout = settings.database.busy_timeout_s
            self._db = Database(resolve_db_url(self.db_url, config_url), timeout)
        if check_schema:
            self._db.require_current_schema()
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.dispose()

"""Alembic environment: runs on the connection clustermgr hands over (see db/database.py)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from clustermgr.db.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        connectable = engine_from_config(
            {"sqlalchemy.url": config.get_main_option("sqlalchemy.url")},
            prefix="sqlalchemy.",
            poolclass=pool.NullPool,
        )
        with connectable.connect() as connection:
            _run(connection)
            connection.commit()
    else:
        _run(connection)


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # type: ignore[attr-defined]
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()

"""Every earlier schema revision, with rows in every table, upgrades to head on SQLite and
on PostgreSQL without losing a row or a value; head downgrades one step and comes back.

The rows are made from the schema itself (reflected at that revision), so a new table or
column is covered without touching this test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory

from clustermgr.db.database import Database, alembic_config, head_revision

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CODED_REASON = "(Code:HEALTH) boot: 1 of 2 GPUs visible"


def revisions() -> list[str]:
    """Oldest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def _alembic(database: Database, action: Any, target: str) -> None:
    with database.engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        action(cfg, target)


def _value(column: sa.Column[Any], table: str) -> Any:
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return True
    if isinstance(kind, sa.Integer):  # BigInteger and SmallInteger too
        return 7
    if isinstance(kind, sa.Float | sa.Numeric):
        return 1.5
    if isinstance(kind, sa.DateTime):
        return WHEN
    if isinstance(kind, sa.JSON):
        return ["sample", 1]
    if isinstance(kind, sa.String):  # Text too
        text = CODED_REASON if column.name == "reason" else f"{table}.{column.name}"
        length = getattr(kind, "length", None)
        return text[:length] if length else text
    raise AssertionError(f"no sample value for {table}.{column.name} ({kind!r})")


def sample_rows(database: Database) -> dict[str, dict[str, Any]]:
    """One row per table (parents first, children pointing at them), as inserted."""
    metadata = sa.MetaData()
    metadata.reflect(database.engine)
    rows: dict[str, dict[str, Any]] = {}
    with database.engine.begin() as conn:
        for table in metadata.sorted_tables:
            if table.name == "alembic_version":
                continue
            made = conn.execute(sa.select(table)).first()
            if made is not None:  # a row the migration itself writes (leader_lock's key)
                rows[table.name] = dict(made._mapping)
                continue
            row = {}
            for column in table.columns:
                if column.foreign_keys:
                    target = next(iter(column.foreign_keys)).column
                    row[column.name] = rows[target.table.name][target.name]
                elif column.primary_key and isinstance(column.type, sa.Integer):
                    row[column.name] = 1
                else:
                    row[column.name] = _value(column, table.name)
            conn.execute(table.insert().values(**row))
            rows[table.name] = row
    return rows


def read_rows(database: Database) -> dict[str, list[dict[str, Any]]]:
    metadata = sa.MetaData()
    metadata.reflect(database.engine)
    found: dict[str, list[dict[str, Any]]] = {}
    with database.engine.connect() as conn:
        for table in metadata.sorted_tables:
            found[table.name] = [dict(r._mapping) for r in conn.execute(sa.select(table))]
    return found


def _normal(value: Any) -> Any:
    """SQLite hands datetimes back without their zone: compare in UTC."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def assert_rows_survive(before: dict[str, dict[str, Any]], after: Any) -> None:
    for table, row in before.items():
        assert after.get(table), f"table {table} or its row lost"
        (kept,) = after[table]
        for column, value in row.items():
            if column in kept:
                assert _normal(kept[column]) == _normal(value), (table, column, kept[column])


def test_there_are_earlier_revisions_to_upgrade_from() -> None:
    assert revisions()[-1] == head_revision()
    assert len(revisions()) >= 5


@pytest.mark.parametrize("start", revisions()[:-1])
def test_every_revision_with_rows_upgrades_to_head_keeping_them(db_url: str, start: str) -> None:
    database = Database(db_url)
    try:
        _alembic(database, command.upgrade, start)
        before = sample_rows(database)
        assert before, f"no tables at {start}"

        _alembic(database, command.upgrade, "head")
        assert database.current_revision() == head_revision()
        database.require_current_schema()
        after = read_rows(database)
        assert_rows_survive(before, after)
        if "reason_kind" not in before.get("node_events", {"reason_kind": 1}):
            # 0005 derives the reason's KIND for old events
            assert after["node_events"][0]["reason_kind"] == "HEALTH"
    finally:
        database.dispose()


def test_head_downgrades_one_step_and_back_keeping_rows(db_url: str) -> None:
    database = Database(db_url)
    try:
        _alembic(database, command.upgrade, revisions()[-2])
        older_tables = set(read_rows(database))  # a table head added may go on the way down
        _alembic(database, command.upgrade, "head")
        before = sample_rows(database)
        _alembic(database, command.downgrade, "-1")
        assert database.current_revision() == revisions()[-2]
        middle = read_rows(database)
        before = {t: row for t, row in before.items() if t in older_tables}
        assert_rows_survive(before, middle)
        kept = {t: {c: v for c, v in row.items() if c in middle[t][0]} for t, row in before.items()}
        _alembic(database, command.upgrade, "head")
        after = read_rows(database)
        assert_rows_survive(kept, after)
        if "reason_kind" not in middle["node_events"][0]:  # derived again on the way up
            assert after["node_events"][0]["reason_kind"] == "HEALTH"
    finally:
        database.dispose()

"""Many rows of a versioned table written at once, with the ORM's optimistic check kept.

The ORM writes a mapper with a `version_id_col` (the nodes: `Node.version`) one UPDATE per
row, never as an executemany, because it checks each row's rowcount; a 5,000-node burst
then costs 10,000 node UPDATEs plus 10,000 event INSERTs of one row each
(bench/bench_burst.py). `update_versioned` writes new column values of many loaded rows as
one executemany UPDATE per set of columns, each row still `WHERE id = ? AND version = ?`
with the version moved on by one, and raises the ORM's own StaleDataError
(the transaction rolls back whole) when fewer rows matched than were written: another
writer moved one of them since it was read, exactly as a flush would have said.
`insert_rows` adds rows nobody reads back in the same transaction (events, cost records)
as one executemany INSERT.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Table, and_, bindparam, insert, inspect, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.exc import StaleDataError

PREFIX = "v_"  # bind names must differ from the column names an UPDATE sets


def update_versioned(session: Session, changes: Sequence[tuple[Any, Mapping[str, Any]]]) -> None:
    """Write each (row, {column: new value}) of loaded objects of one versioned mapper;
    afterwards the objects hold the new values and their version one higher, with nothing
    left for the ORM to flush (their attributes are set as committed, never as changes)."""
    if not changes:
        return
    mapper = inspect(changes[0][0]).mapper
    version = mapper.version_id_col
    table = mapper.local_table
    if version is None or not isinstance(table, Table) or len(mapper.primary_key) != 1:
        raise TypeError(f"{mapper.class_.__name__} is not a versioned single-key table")
    key = mapper.primary_key[0]
    groups: dict[tuple[str, ...], list[tuple[Any, Mapping[str, Any]]]] = {}
    for row, columns in changes:
        groups.setdefault(tuple(sorted(columns)), []).append((row, columns))
    connection = session.connection()
    sane = connection.dialect.supports_sane_multi_rowcount
    for names, members in groups.items():
        statement = (
            update(table)
            .where(
                and_(
                    key == bindparam(f"{PREFIX}{key.key}", type_=key.type),
                    version == bindparam(f"{PREFIX}old_version", type_=version.type),
                )
            )
            .values(
                {
                    table.c[c]: bindparam(f"{PREFIX}{c}", type_=table.c[c].type)
                    for c in (*names, version.key)
                }
            )
        )
        params = [
            {
                **{f"{PREFIX}{c}": v for c, v in columns.items()},
                f"{PREFIX}{key.key}": getattr(row, key.key),
                f"{PREFIX}old_version": getattr(row, version.key),
                f"{PREFIX}{version.key}": getattr(row, version.key) + 1,
            }
            for row, columns in members
        ]
        if sane:
            matched = connection.execute(statement, params).rowcount
        else:  # the driver cannot count an executemany: one statement per row
            matched = sum(connection.execute(statement, p).rowcount for p in params)
        if matched != len(params):
            raise StaleDataError(
                f"UPDATE statement on table '{table.name}' expected to update "
                f"{len(params)} row(s); {matched} were matched."
            )
        for (row, columns), p in zip(members, params, strict=True):
            for column, value in columns.items():
                set_committed_value(row, column, value)
            set_committed_value(row, version.key, p[f"{PREFIX}{version.key}"])


def insert_rows(session: Session, table: Table, rows: Iterable[Mapping[str, Any]]) -> None:
    """One executemany INSERT (no primary keys read back)."""
    values = list(rows)
    if values:
        session.connection().execute(insert(table), values)

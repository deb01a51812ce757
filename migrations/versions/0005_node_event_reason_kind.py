"""node_events.reason_kind: the KIND of a `(Code:KIND) detail` reason, as a column

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The migration keeps its own copy of the pattern: a migration must not change when the
# application code does (clustermgr.core.reasons is the live definition).
_CODED = re.compile(r"^\(Code:([A-Z][A-Z0-9_]*)\)")


def upgrade() -> None:
    with op.batch_alter_table("node_events") as batch:
        batch.add_column(sa.Column("reason_kind", sa.String(length=32), nullable=True))
        batch.create_index("ix_node_events_reason_kind", ["reason_kind"])
    events = sa.table(
        "node_events",
        sa.column("id", sa.BigInteger()),
        sa.column("reason", sa.Text()),
        sa.column("reason_kind", sa.String(32)),
    )
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(events.c.id, events.c.reason).where(events.c.reason.like("(Code:%"))
    )
    for event_id, reason in rows.fetchall():
        found = _CODED.match(reason or "")
        if found:
            connection.execute(
                events.update().where(events.c.id == event_id).values(reason_kind=found[1])
            )


def downgrade() -> None:
    with op.batch_alter_table("node_events") as batch:
        batch.drop_index("ix_node_events_reason_kind")
        batch.drop_column("reason_kind")

"""leader_lease: the leader's lease, renewed while it leads; its generation fences every
write a daemon makes (a leader that wakes from a freeze after a takeover writes nothing)

Revision ID: 0016_leader_lease
Revises: 0014_node_image_revision
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_leader_lease"
down_revision = "0014_node_image_revision"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "leader_lease",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("holder", sa.String(length=128), nullable=True),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        # seconds since the epoch on the database server's clock (both heads read one clock)
        sa.Column("acquired_at", sa.Float(), nullable=False),
        sa.Column("renewed_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        # the holder also holds the session lock (advisory lock / flock), so a free session
        # lock means the holder's process or session is gone
        sa.Column("locked", sa.Boolean(), nullable=False),
    )
    op.bulk_insert(
        table,
        [
            {
                "id": 1,
                "holder": None,
                "generation": 0,
                "acquired_at": 0.0,
                "renewed_at": 0.0,
                "expires_at": 0.0,
                "locked": False,
            }
        ],
    )


def downgrade() -> None:
    op.drop_table("leader_lease")

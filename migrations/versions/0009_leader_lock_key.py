"""leader_lock: the PostgreSQL advisory-lock key, 63 random bits made once here (a key
derived from the cluster's name let any role that could connect take the lock)

Revision ID: 0009_leader_lock_key
Revises: 0008_ownership
Create Date: 2026-11-25
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0009_leader_lock_key"
down_revision = "0008_ownership"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "leader_lock",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("lock_key", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "lock_key": secrets.randbits(63)}])


def downgrade() -> None:
    op.drop_table("leader_lock")

"""daemon status

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "daemon_status",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_cycle_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_cycle_ok", sa.Boolean(), nullable=True),
        sa.Column("last_cycle_summary", sa.Text(), nullable=False),
        sa.Column("last_cycle_duration_s", sa.Float(), nullable=True),
        sa.Column("pending_jobs", sa.Integer(), nullable=False),
        sa.Column("pending_gpus", sa.Integer(), nullable=False),
        sa.Column("hourly_cost", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_daemon_status")),
    )


def downgrade() -> None:
    op.drop_table("daemon_status")

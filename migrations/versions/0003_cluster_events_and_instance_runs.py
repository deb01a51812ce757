"""cluster events and instance runs

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_events")),
    )
    with op.batch_alter_table("cluster_events", schema=None) as batch_op:
        batch_op.create_index("ix_cluster_events_at", ["at"], unique=False)

    op.create_table(
        "instance_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("template", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("market", sa.String(length=16), nullable=False),
        sa.Column("hourly_price", sa.Float(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_runs")),
        sa.UniqueConstraint("instance_id", name=op.f("uq_instance_runs_instance_id")),
    )
    with op.batch_alter_table("instance_runs", schema=None) as batch_op:
        batch_op.create_index("ix_instance_runs_started", ["started_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("instance_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_instance_runs_started")

    op.drop_table("instance_runs")
    with op.batch_alter_table("cluster_events", schema=None) as batch_op:
        batch_op.drop_index("ix_cluster_events_at")

    op.drop_table("cluster_events")

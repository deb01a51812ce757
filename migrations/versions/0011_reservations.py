"""reservations: the capacity reservations templates launch into (AWS On-Demand Capacity
Reservations and Capacity Blocks, Azure capacity reservation groups), read with the catalog
refresh so `clustermgr catalog --reservations` and `status` ask no cloud

Revision ID: 0011_reservations
Revises: 0010_munge_key_redemptions
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_reservations"
down_revision = "0010_munge_key_redemptions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("reservation_id", sa.String(length=512), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("zone", sa.String(length=64), nullable=True),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("available", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("templates", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservations")),
        sa.UniqueConstraint("provider", "reservation_id", name=op.f("uq_reservations_provider")),
    )


def downgrade() -> None:
    op.drop_table("reservations")

"""munge_key_redemptions: which address got the munge key for which launch request, kept
in the database (a grants file in one head's state dir was unknown to the standby after a
takeover, so nodes booting then could not join)

Revision ID: 0010_munge_key_redemptions
Revises: 0009_leader_lock_key
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_munge_key_redemptions"
down_revision = "0009_leader_lock_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "munge_key_redemptions",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("redeemed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("request_id", "address", name=op.f("pk_munge_key_redemptions")),
    )
    op.create_index(
        op.f("ix_munge_key_redemptions_redeemed_at"), "munge_key_redemptions", ["redeemed_at"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_munge_key_redemptions_redeemed_at"), "munge_key_redemptions")
    op.drop_table("munge_key_redemptions")

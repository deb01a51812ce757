"""nodes.image_revision, nodes.kernel: what a burst node reports it runs

Revision ID: 0013_node_image_revision
Revises: 0011_reservations
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_node_image_revision"
down_revision = "0011_reservations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("image_revision", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("kernel", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("kernel")
        batch.drop_column("image_revision")

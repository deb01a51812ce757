"""instance_types.fabrics: the fabrics each cached instance type can carry (AWS EFA, Azure
InfiniBand), so `clustermgr config check` refuses a template asking for one on a type that
lacks it; NULL where the catalog does not say

Revision ID: 0012_instance_type_fabrics
Revises: 0011_reservations
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_instance_type_fabrics"
down_revision = "0011_reservations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instance_types") as batch:
        batch.add_column(sa.Column("fabrics", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instance_types") as batch:
        batch.drop_column("fabrics")

"""transfers: cmsub's chain (stage id, the transfer job, the staging area), its items,
file counts and verification, start and cleanup times

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COLUMNS = (
    "stage_id",
    "uid",
    "transfer_job_id",
    "stage_dir",
    "items",
    "files_total",
    "files_done",
    "files_verified",
    "started_at",
    "cleaned_at",
)


def upgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.add_column(
            sa.Column("stage_id", sa.String(length=64), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("uid", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("transfer_job_id", sa.String(length=64), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("stage_dir", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("items", sa.JSON(), nullable=True))
        for name in ("files_total", "files_done", "files_verified"):
            batch.add_column(sa.Column(name, sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("cleaned_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_transfers_stage", ["stage_id"])


def downgrade() -> None:
    with op.batch_alter_table("transfers") as batch:
        batch.drop_index("ix_transfers_stage")
        for name in COLUMNS:
            batch.drop_column(name)

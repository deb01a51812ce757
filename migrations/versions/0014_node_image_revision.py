"""nodes.image_revision, nodes.kernel: what a burst node reports it runs

Revision ID: 0014_node_image_revision
Revises: 0013_job_runs
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_node_image_revision"
down_revision = "0013_job_runs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("image_revision", sa.String(length=64), nullable=True))
    op.add_column("nodes", sa.Column("kernel", sa.String(length=128), nullable=True))


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite 3.35+ has it): a batch copy would drop and re-create the
    # nodes table, and SQLite's drop cascades to every node's events
    op.drop_column("nodes", "kernel")
    op.drop_column("nodes", "image_revision")

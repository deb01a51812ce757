"""launch_requests: a node launch's whole identity (nodes, jobs, market, all-or-nothing,
placement, client token), so a relaunch after a crash or a takeover replays it exactly

Revision ID: 0015_launch_identity
Revises: 0014_node_image_revision
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_launch_identity"
down_revision = "0014_node_image_revision"
branch_labels = None
depends_on = None

COLUMNS = (
    "client_token",
    "launch_group",
    "placement_group",
    "all_or_nothing",
    "market",
    "jobs",
    "nodes",
)


def upgrade() -> None:
    op.add_column("launch_requests", sa.Column("nodes", sa.Text(), nullable=True))
    op.add_column("launch_requests", sa.Column("jobs", sa.Text(), nullable=True))
    op.add_column("launch_requests", sa.Column("market", sa.String(length=16), nullable=True))
    op.add_column(
        "launch_requests",
        sa.Column("all_or_nothing", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column(
        "launch_requests", sa.Column("placement_group", sa.String(length=255), nullable=True)
    )
    op.add_column("launch_requests", sa.Column("launch_group", sa.String(length=16), nullable=True))
    op.add_column("launch_requests", sa.Column("client_token", sa.String(length=64), nullable=True))


def downgrade() -> None:
    # plain DROP COLUMNs (SQLite 3.35+ has them), as 0014's downgrade
    for column in COLUMNS:
        op.drop_column("launch_requests", column)

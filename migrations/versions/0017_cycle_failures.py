"""daemon_status: failed cycles (in a row, since the process started) and the configuration
in effect (path, digest, when loaded), for `clustermgr status` and `status --check`

Revision ID: 0017_cycle_failures
Revises: 0016_leader_lease
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_cycle_failures"
down_revision = "0016_leader_lease"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "daemon_status",
        sa.Column("cycles_failed_in_row", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "daemon_status",
        sa.Column("cycles_failed", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column("daemon_status", sa.Column("config_path", sa.Text(), nullable=True))
    op.add_column("daemon_status", sa.Column("config_digest", sa.String(length=32), nullable=True))
    op.add_column(
        "daemon_status", sa.Column("config_loaded_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    # plain DROP COLUMNs (SQLite 3.35+): nothing refers to daemon_status
    for column in (
        "config_loaded_at",
        "config_digest",
        "config_path",
        "cycles_failed",
        "cycles_failed_in_row",
    ):
        op.drop_column("daemon_status", column)

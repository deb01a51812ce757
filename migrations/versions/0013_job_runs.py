"""job_runs: jobs cm-scale saw run and finish (user, shape, time limit, run time), the
site's run-time history onprem_first's start estimates read

Revision ID: 0013_job_runs
Revises: 0012_instance_type_fabrics
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_job_runs"
down_revision = "0012_instance_type_fabrics"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_runs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("shape", sa.Text(), nullable=False),
        sa.Column("limit_s", sa.Float(), nullable=False),
        sa.Column("run_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_runs")),
    )
    op.create_index("ix_job_runs_finished_at", "job_runs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_job_runs_finished_at", table_name="job_runs")
    op.drop_table("job_runs")

"""launch_requests (every request id cm-scale issued) and foreign_instances (instances
tagged as this cluster's that it never launched); request ids held today are recorded as
issued, so a launch in flight across the upgrade is still adopted or cleaned up

Revision ID: 0008_ownership
Revises: 0007
Create Date: 2026-11-25
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0008_ownership"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    requests = op.create_table(
        "launch_requests",
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_launch_requests")),
    )
    op.create_table(
        "foreign_instances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("template_tag", sa.String(length=128), nullable=False),
        sa.Column("request_tag", sa.String(length=128), nullable=False),
        sa.Column("role_tag", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("launched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_foreign_instances")),
        sa.UniqueConstraint("provider", "instance_id", name=op.f("uq_foreign_instances_provider")),
    )
    _record_held_requests(requests)


def _record_held_requests(requests: sa.Table) -> None:
    """The request ids node and director rows hold now were issued by cm-scale (committed
    before their launch call): without them an interrupted launch would turn foreign."""
    conn = op.get_bind()
    now = datetime.now(UTC)
    rows: dict[str, dict[str, object]] = {}
    held_by_nodes = sa.text(
        "SELECT request_id, provider, template FROM nodes WHERE request_id IS NOT NULL"
    )
    for request_id, provider, template in conn.execute(held_by_nodes):
        rows[request_id] = dict(
            request_id=request_id,
            kind="node",
            provider=provider or "",
            owner=template or "",
            issued_at=now,
        )
    held_by_directors = sa.text(
        "SELECT d.request_id, p.name, d.name FROM directors d JOIN regions r "
        "ON r.id = d.region_id JOIN providers p ON p.id = r.provider_id "
        "WHERE d.request_id IS NOT NULL"
    )
    for request_id, provider, name in conn.execute(held_by_directors):
        rows[request_id] = dict(
            request_id=request_id, kind="director", provider=provider, owner=name, issued_at=now
        )
    if rows:
        op.bulk_insert(requests, list(rows.values()))


def downgrade() -> None:
    op.drop_table("foreign_instances")
    op.drop_table("launch_requests")

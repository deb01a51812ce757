"""directors: lifecycle and events; image revisions and replica figures; cloud machine
image copies; LDAP replicas

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("directors") as batch:
        batch.add_column(sa.Column("instance_type", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("request_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("state_reason", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("state_since", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("launched_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("healthy_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("health", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("idle_since", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "director_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("director_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("old_state", sa.String(length=16), nullable=False),
        sa.Column("new_state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["director_id"],
            ["directors.id"],
            name=op.f("fk_director_events_director_id_directors"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_director_events")),
    )
    op.create_index("ix_director_events_director_id", "director_events", ["director_id"])

    with op.batch_alter_table("images") as batch:
        batch.add_column(sa.Column("file_count", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("source_path", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("manifest_path", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("image_replicas") as batch:
        batch.alter_column("bytes_done", new_column_name="bytes_sent")
        batch.add_column(sa.Column("files_sent", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("sync_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("verify_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("error", sa.Text(), nullable=False, server_default=""))

    op.create_table(
        "machine_images",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("image_name", sa.String(length=128), nullable=False),
        sa.Column("provider_name", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("source_image", sa.String(length=255), nullable=False),
        sa.Column("image_id", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("available_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_machine_images")),
        sa.UniqueConstraint(
            "image_name",
            "provider_name",
            "region",
            name=op.f("uq_machine_images_image_name"),
        ),
    )
    op.create_table(
        "ldap_replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("director_id", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("entries", sa.Integer(), nullable=False),
        sa.Column("provider_csn", sa.String(length=64), nullable=True),
        sa.Column("replica_csn", sa.String(length=64), nullable=True),
        sa.Column("lag_seconds", sa.Float(), nullable=True),
        sa.Column("watermark", sa.String(length=32), nullable=True),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_full_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["director_id"],
            ["directors.id"],
            name=op.f("fk_ldap_replicas_director_id_directors"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ldap_replicas")),
        sa.UniqueConstraint("director_id", name=op.f("uq_ldap_replicas_director_id")),
    )
    # the LDAP sync time moves to ldap_replicas (with the rest of the replica's state)
    directors = sa.table(
        "directors", sa.column("id", sa.Integer), sa.column("ldap_synced_at", sa.DateTime)
    )
    replicas = sa.table(
        "ldap_replicas",
        sa.column("director_id", sa.Integer),
        sa.column("mode", sa.String),
        sa.column("state", sa.String),
        sa.column("entries", sa.Integer),
        sa.column("last_success_at", sa.DateTime),
        sa.column("error", sa.Text),
        sa.column("updated_at", sa.DateTime),
    )
    conn = op.get_bind()
    synced = conn.execute(
        sa.select(directors.c.id, directors.c.ldap_synced_at).where(
            directors.c.ldap_synced_at.is_not(None)
        )
    ).all()
    for director_id, at in synced:
        conn.execute(
            replicas.insert().values(
                director_id=director_id,
                mode="pull",
                state="ok",
                entries=0,
                last_success_at=at,
                error="",
                updated_at=at,
            )
        )
    _drop_columns("directors", "ldap_synced_at")


def downgrade() -> None:
    with op.batch_alter_table("directors") as batch:
        batch.add_column(sa.Column("ldap_synced_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(
        "UPDATE directors SET ldap_synced_at = (SELECT last_success_at FROM ldap_replicas"
        " WHERE ldap_replicas.director_id = directors.id)"
    )
    op.drop_table("ldap_replicas")
    op.drop_table("machine_images")
    with op.batch_alter_table("image_replicas") as batch:
        for column in (
            "error",
            "verified_at",
            "started_at",
            "verify_seconds",
            "sync_seconds",
            "files_sent",
        ):
            batch.drop_column(column)
        batch.alter_column("bytes_sent", new_column_name="bytes_done")
    _drop_columns("images", "manifest_path", "source_path", "file_count")
    op.drop_index("ix_director_events_director_id", table_name="director_events")
    op.drop_table("director_events")
    _drop_columns(
        "directors",
        "idle_since",
        "health",
        "healthy_at",
        "launched_at",
        "state_since",
        "state_reason",
        "request_id",
        "instance_type",
    )


def _drop_columns(table: str, *columns: str) -> None:
    """Plain ALTER TABLE, never a batch, for a table other rows point at: SQLite's batch
    mode copies the table, and dropping the old one cascades to every row pointing at it."""
    for column in columns:
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")

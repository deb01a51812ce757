"""ORM model. The schema only changes through Alembic revisions in migrations/."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use datetime.now(UTC)")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}


class Provider(Base):
    __tablename__ = "providers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    type: Mapped[str] = mapped_column(String(16))
    region: Mapped[str] = mapped_column(String(64))
    credentials_source: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Region(Base):
    __tablename__ = "regions"
    __table_args__ = (UniqueConstraint("provider_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    provider_id: Mapped[int] = mapped_column(ForeignKey("providers.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))


class Template(Base):
    __tablename__ = "templates"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    provider_name: Mapped[str] = mapped_column(String(64))
    region: Mapped[str] = mapped_column(String(64))
    partition: Mapped[str] = mapped_column(String(64))
    hostlist: Mapped[str] = mapped_column(Text)
    instance_types: Mapped[list[str]] = mapped_column(JSON)
    image: Mapped[str] = mapped_column(String(255))
    cpus: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str | None] = mapped_column(String(64))
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    max_nodes: Mapped[int] = mapped_column(Integer)
    market: Mapped[str] = mapped_column(String(16))
    demand_mode: Mapped[str] = mapped_column(String(16), default="policy")
    retired: Mapped[bool] = mapped_column(default=False)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Node(Base):
    __tablename__ = "nodes"
    __table_args__ = (
        Index("ix_nodes_state", "state"),
        Index("ix_nodes_template", "template"),
        Index("ix_nodes_instance_id", "instance_id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # "onprem" or "cloud"
    state: Mapped[str] = mapped_column(String(16))
    state_reason: Mapped[str] = mapped_column(Text, default="")
    state_since: Mapped[datetime] = mapped_column(default=utcnow)
    template: Mapped[str | None] = mapped_column(String(64))
    provider: Mapped[str | None] = mapped_column(String(64))
    region: Mapped[str | None] = mapped_column(String(64))
    partitions: Mapped[str] = mapped_column(String(255), default="")
    instance_id: Mapped[str | None] = mapped_column(String(128))
    instance_type: Mapped[str | None] = mapped_column(String(64))
    market: Mapped[str | None] = mapped_column(String(16))
    request_id: Mapped[str | None] = mapped_column(String(64))
    private_address: Mapped[str | None] = mapped_column(String(64))
    hostname: Mapped[str | None] = mapped_column(String(255))
    cpus: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    gpu_model: Mapped[str | None] = mapped_column(String(64))
    slurm_state: Mapped[str] = mapped_column(String(128), default="")
    # what the node reports it runs (its Slurm Extra field, checked): None until it does
    image_revision: Mapped[str | None] = mapped_column(String(64))
    kernel: Mapped[str | None] = mapped_column(String(128))
    idle_since: Mapped[datetime | None] = mapped_column()
    launched_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    version: Mapped[int] = mapped_column(Integer, nullable=False)

    events: Mapped[list[NodeEvent]] = relationship(
        back_populates="node", order_by="NodeEvent.id", cascade="all, delete-orphan"
    )

    __mapper_args__ = {"version_id_col": version}


class NodeEvent(Base):
    __tablename__ = "node_events"
    __table_args__ = (
        Index("ix_node_events_at", "at"),
        Index("ix_node_events_reason_kind", "reason_kind"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    old_state: Mapped[str] = mapped_column(String(16))
    new_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    reason_kind: Mapped[str | None] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(64))

    node: Mapped[Node] = relationship(back_populates="events")


class Director(Base):
    """A per-region cloud director: serves the software image and an LDAP replica to the
    region's burst nodes. Its state moves like a node's, with events (directors/)."""

    __tablename__ = "directors"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="RESTRICT"))
    instance_id: Mapped[str | None] = mapped_column(String(128))
    instance_type: Mapped[str | None] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(64))
    private_address: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    state_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    state_since: Mapped[datetime | None] = mapped_column()
    launched_at: Mapped[datetime | None] = mapped_column()
    healthy_at: Mapped[datetime | None] = mapped_column()  # the last health check it passed
    health: Mapped[str] = mapped_column(Text, default="", server_default="")  # last check's line
    idle_since: Mapped[datetime | None] = mapped_column()  # no burst node in its region since
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    events: Mapped[list[DirectorEvent]] = relationship(
        back_populates="director", order_by="DirectorEvent.id", cascade="all, delete-orphan"
    )


class DirectorEvent(Base):
    __tablename__ = "director_events"
    __table_args__ = (Index("ix_director_events_director_id", "director_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    director_id: Mapped[int] = mapped_column(ForeignKey("directors.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    old_state: Mapped[str] = mapped_column(String(16))
    new_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    actor: Mapped[str] = mapped_column(String(64))

    director: Mapped[Director] = relationship(back_populates="events")


class Image(Base):
    """One revision of a software image tree (what directors replicate). `version` is the
    revision id and `checksum` the tree hash of its manifest (written at `manifest_path`)."""

    __tablename__ = "images"
    __table_args__ = (UniqueConstraint("name", "version"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    version: Mapped[str] = mapped_column(String(64))
    checksum: Mapped[str] = mapped_column(String(128))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    file_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    source_path: Mapped[str] = mapped_column(Text, default="", server_default="")
    manifest_path: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ImageReplica(Base):
    """One image revision on one director: synced, then verified against the manifest."""

    __tablename__ = "image_replicas"
    __table_args__ = (UniqueConstraint("image_id", "director_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"))
    director_id: Mapped[int] = mapped_column(ForeignKey("directors.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16))
    checksum: Mapped[str | None] = mapped_column(String(128))  # tree hash found on the director
    bytes_sent: Mapped[int] = mapped_column(BigInteger, default=0)
    files_sent: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    sync_seconds: Mapped[float | None] = mapped_column(Float)
    verify_seconds: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[datetime | None] = mapped_column()
    verified_at: Mapped[datetime | None] = mapped_column()
    error: Mapped[str] = mapped_column(Text, default="", server_default="")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class MachineImage(Base):
    """A cloud machine image copied into a region in use (AWS copy_image), until available."""

    __tablename__ = "machine_images"
    __table_args__ = (UniqueConstraint("image_name", "provider_name", "region"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    image_name: Mapped[str] = mapped_column(String(128))
    provider_name: Mapped[str] = mapped_column(String(64))
    region: Mapped[str] = mapped_column(String(64))
    source_image: Mapped[str] = mapped_column(String(255))
    image_id: Mapped[str | None] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16))  # pending, available, failed
    error: Mapped[str] = mapped_column(Text, default="")
    requested_at: Mapped[datetime] = mapped_column(default=utcnow)
    available_at: Mapped[datetime | None] = mapped_column()


class LdapReplica(Base):
    """The LDAP replica on one director: its mode (syncrepl or pull) and how far behind."""

    __tablename__ = "ldap_replicas"
    __table_args__ = (UniqueConstraint("director_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    director_id: Mapped[int] = mapped_column(ForeignKey("directors.id", ondelete="CASCADE"))
    mode: Mapped[str] = mapped_column(String(16))  # syncrepl or pull
    state: Mapped[str] = mapped_column(String(16))  # ok, lagging, failed, unreachable
    entries: Mapped[int] = mapped_column(Integer, default=0)
    provider_csn: Mapped[str | None] = mapped_column(String(64))
    replica_csn: Mapped[str | None] = mapped_column(String(64))
    lag_seconds: Mapped[float | None] = mapped_column(Float)
    watermark: Mapped[str | None] = mapped_column(String(32))  # pull: modifyTimestamp synced
    last_attempt_at: Mapped[datetime | None] = mapped_column()
    last_success_at: Mapped[datetime | None] = mapped_column()
    last_full_at: Mapped[datetime | None] = mapped_column()
    error: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Transfer(Base):
    """One cmsub stage-in or stage-out of a job's data."""

    __tablename__ = "transfers"
    __table_args__ = (
        Index("ix_transfers_job", "job_id"),
        Index("ix_transfers_stage", "stage_id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(String(64))
    user: Mapped[str] = mapped_column(String(64))
    direction: Mapped[str] = mapped_column(String(8))  # "in" or "out"
    source: Mapped[str] = mapped_column(Text)
    destination: Mapped[str] = mapped_column(Text)
    transport: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    bytes_total: Mapped[int | None] = mapped_column(BigInteger)
    bytes_done: Mapped[int] = mapped_column(BigInteger, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()
    # 0007: the chain (stage id, its three Slurm jobs), what moved, what was verified
    stage_id: Mapped[str] = mapped_column(String(64), default="")
    uid: Mapped[int | None] = mapped_column(Integer)
    transfer_job_id: Mapped[str] = mapped_column(String(64), default="")  # the stage job
    stage_dir: Mapped[str] = mapped_column(Text, default="")  # the area on the target
    items: Mapped[list[Any] | None] = mapped_column(JSON, default=list)  # [[src, dest], ...]
    files_total: Mapped[int] = mapped_column(Integer, default=0)
    files_done: Mapped[int] = mapped_column(Integer, default=0)
    files_verified: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column()
    cleaned_at: Mapped[datetime | None] = mapped_column()


class InstanceTypeRow(Base):
    """Cached catalog facts per provider and instance type."""

    __tablename__ = "instance_types"
    __table_args__ = (UniqueConstraint("provider", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    provider: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(64))
    vcpus: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    gpu_model: Mapped[str | None] = mapped_column(String(64))
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    gpu_memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    architecture: Mapped[str] = mapped_column(String(16), default="x86_64")
    # "efa", "infiniband" (comma-separated; "" for none); NULL: the catalog does not say
    fabrics: Mapped[str | None] = mapped_column(String(64))
    price_on_demand: Mapped[float | None] = mapped_column(Float)
    price_spot: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ReservationRow(Base):
    """Cached facts of a reservation templates launch into, read with the catalog refresh
    (clustermgr.providers.reservations)."""

    __tablename__ = "reservations"
    __table_args__ = (UniqueConstraint("provider", "reservation_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    provider: Mapped[str] = mapped_column(String(64))
    reservation_id: Mapped[str] = mapped_column(String(512))
    kind: Mapped[str] = mapped_column(String(32))  # reservation, capacity-block, group
    instance_type: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str | None] = mapped_column(String(64))
    total: Mapped[int] = mapped_column(Integer)
    available: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32))
    starts_at: Mapped[datetime | None] = mapped_column()
    ends_at: Mapped[datetime | None] = mapped_column()
    templates: Mapped[str] = mapped_column(Text, default="")  # comma-separated names
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ClusterEvent(Base):
    """Something that happened to the cluster rather than to one node: a cycle's result,
    a policy error, a hook request, a refused launch."""

    __tablename__ = "cluster_events"
    __table_args__ = (Index("ix_cluster_events_at", "at"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))  # cycle, policy-error, hook, refusal, ...
    source: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)


class JobRun(Base):
    """A job cm-scale saw running and then gone (not requeued): what the site's run-time
    history learns from (workload.history; onprem_first's start estimates). No job id or
    command: its user, shape, time limit and run time are all the history needs."""

    __tablename__ = "job_runs"
    __table_args__ = (Index("ix_job_runs_finished_at", "finished_at"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    finished_at: Mapped[datetime] = mapped_column()  # the first cycle that saw it gone
    user: Mapped[str] = mapped_column(String(64))
    shape: Mapped[str] = mapped_column(Text)  # JSON list of policy.fit.job_shape's fields
    limit_s: Mapped[float] = mapped_column(Float)
    run_s: Mapped[float] = mapped_column(Float)


class InstanceRun(Base):
    """One instance's life, for cost: opened at launch, closed (with its cost) at terminate."""

    __tablename__ = "instance_runs"
    __table_args__ = (Index("ix_instance_runs_started", "started_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(128))
    template: Mapped[str] = mapped_column(String(64))
    provider: Mapped[str] = mapped_column(String(64))
    instance_id: Mapped[str] = mapped_column(String(128), unique=True)
    instance_type: Mapped[str] = mapped_column(String(64))
    market: Mapped[str] = mapped_column(String(16))
    hourly_price: Mapped[float] = mapped_column(Float, default=0.0)
    started_at: Mapped[datetime] = mapped_column()
    ended_at: Mapped[datetime | None] = mapped_column()
    cost: Mapped[float | None] = mapped_column(Float)


class DaemonStatus(Base):
    """One row per cm-scale process: its role, heartbeat and last cycle (for `status`)."""

    __tablename__ = "daemon_status"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)  # host:pid
    host: Mapped[str] = mapped_column(String(128))
    pid: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))  # leader, standby, stopped
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_cycle_at: Mapped[datetime | None] = mapped_column()
    last_cycle_ok: Mapped[bool | None] = mapped_column()
    last_cycle_summary: Mapped[str] = mapped_column(Text, default="")
    last_cycle_duration_s: Mapped[float | None] = mapped_column(Float)
    pending_jobs: Mapped[int] = mapped_column(Integer, default=0)
    pending_gpus: Mapped[int] = mapped_column(Integer, default=0)
    hourly_cost: Mapped[float] = mapped_column(Float, default=0.0)
    # the process's failed cycles: the ones since its last good cycle, and all since it
    # started (`status --check` reports the first, `status` both)
    cycles_failed_in_row: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cycles_failed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # the configuration it runs on: its file, that file's digest as loaded (a refused
    # reload leaves them as they were) and when it was loaded
    config_path: Mapped[str | None] = mapped_column(Text)
    config_digest: Mapped[str | None] = mapped_column(String(32))
    config_loaded_at: Mapped[datetime | None] = mapped_column()


class LeaderLease(Base):
    """The one leader's lease (row id 1): who holds it, until when (seconds since the epoch
    on the database server's clock) and its generation, which every fenced write checks in
    its own transaction (runtime/leader.py)."""

    __tablename__ = "leader_lease"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(128))
    generation: Mapped[int] = mapped_column(BigInteger, default=0)
    acquired_at: Mapped[float] = mapped_column(Float, default=0.0)
    renewed_at: Mapped[float] = mapped_column(Float, default=0.0)
    expires_at: Mapped[float] = mapped_column(Float, default=0.0)
    locked: Mapped[bool] = mapped_column(Boolean, default=False)


class LaunchRequest(Base):
    """A request id cm-scale issued, committed before the launch call that carries it (node
    launches and director launches): the proof that an instance tagged with it is ours to
    adopt or terminate. Tags alone prove nothing (anyone with the cloud account can set them)."""

    __tablename__ = "launch_requests"
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # "node" or "director"
    provider: Mapped[str] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(128))  # the template, or the director's name
    issued_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A node launch's whole identity, so a relaunch after a crash or a takeover re-issues
    # exactly what was asked (migration 0015; NULL for rows from before it, and directors'):
    # the nodes in launch order and the jobs they serve (comma-separated), the market,
    # all-or-nothing, the template's static placement group and per-launch placement policy
    # at issue time, and the base the cloud's idempotency tokens derive from.
    nodes: Mapped[str | None] = mapped_column(Text, nullable=True)
    jobs: Mapped[str | None] = mapped_column(Text, nullable=True)
    market: Mapped[str | None] = mapped_column(String(16), nullable=True)
    all_or_nothing: Mapped[bool] = mapped_column(default=False)
    placement_group: Mapped[str | None] = mapped_column(String(255), nullable=True)
    launch_group: Mapped[str | None] = mapped_column(String(16), nullable=True)
    client_token: Mapped[str | None] = mapped_column(String(64), nullable=True)


class ForeignInstance(Base):
    """An instance listed with this cluster's tags that cm-scale never launched (its request
    id was never issued, its instance id never recorded): reported, never touched. The tag
    values are the cloud's, stored escaped and cut to the column sizes."""

    __tablename__ = "foreign_instances"
    __table_args__ = (UniqueConstraint("provider", "instance_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    provider: Mapped[str] = mapped_column(String(64))
    instance_id: Mapped[str] = mapped_column(String(128))
    template_tag: Mapped[str] = mapped_column(String(128), default="")
    request_tag: Mapped[str] = mapped_column(String(128), default="")
    role_tag: Mapped[str] = mapped_column(String(64), default="")
    state: Mapped[str] = mapped_column(String(16), default="")
    launched_at: Mapped[datetime | None] = mapped_column()  # the cloud's launch time
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class LeaderLockKey(Base):
    """The PostgreSQL leader's advisory-lock key: random, written once by migration 0009."""

    __tablename__ = "leader_lock"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lock_key: Mapped[int] = mapped_column(BigInteger)


class MungeKeyRedemption(Base):
    """A burst node's address that was handed the munge key for its launch request: each
    address of a request gets it once, whichever head (leader or the standby after a
    takeover) answers. No token is kept: a request's token is derived from the munge key."""

    __tablename__ = "munge_key_redemptions"
    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    address: Mapped[str] = mapped_column(String(64), primary_key=True)
    redeemed_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)

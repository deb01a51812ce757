"""The staging service's operations: the only code that writes `transfers` rows. Every
request names its caller by the uid the kernel (SO_PEERCRED) or munged proved, never by a
field of the request, and every row it touches must be that uid's.

Operations (one JSON object in, one out; docs/staging.md "The channel"):
  create     check and record a chain's two transfers; create `<root>/<user>` (0700, theirs)
  submitted  the chain's Slurm job ids, once cmsub (as the user) submitted them
  forget     drop a chain whose submission failed
  status     the caller's chain holding a job id
  begin      a transfer job's plan: what to copy from where to where
  finish     its result; what to cancel after a failed stage-in, what to clean after a
             verified stage-out
  cleaned    areas the caller removed
"""

from __future__ import annotations

import logging
import pwd
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from clustermgr.config import Settings, StagingRegionSettings
from clustermgr.core.errors import ClusterMgrError, ConfigError, UsageError
from clustermgr.db.database import Database
from clustermgr.db.models import Transfer
from clustermgr.staging import (
    areas,
    director,
    records,
    rsync_transport,
    rsyncd_auth,
    s3_access,
    s3_transport,
)
from clustermgr.staging.checks import area_path, check_quota
from clustermgr.staging.wire import Caller, Refused

log = logging.getLogger(__name__)
MAX_ITEMS = 1000
MAX_PATH = 4096
STATS = ("bytes_total", "bytes_sent", "files_total", "files_sent")


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


def account_of(caller: Caller) -> Account:
    try:
        entry = pwd.getpwuid(caller.uid)
    except KeyError:
        raise Refused(f"uid {caller.uid} has no account on the staging service's host") from None
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


# --- what a request may carry ----------------------------------------------------------


def _text(args: dict[str, Any], key: str, *, optional: bool = False) -> str:
    value = args.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str) or len(value) > MAX_PATH or "\0" in value:
        raise Refused(f"request field {key!r}: a string of at most {MAX_PATH} characters")
    return value


def _count(args: dict[str, Any], key: str) -> int:
    value = args.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Refused(f"request field {key!r}: a whole number >= 0")
    return value


def _job_id(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.isdigit() or len(value) > 20:
        raise Refused(f"request field {key!r}: a Slurm job id (digits)")
    return value


def _absolute(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise Refused(f"{what}: an absolute path on this cluster")
    if len(value) > MAX_PATH or ".." in PurePosixPath(value).parts:
        raise Refused(f"{what}: {value[:80]!r} is too long or holds '..'")
    return value


def _items(args: dict[str, Any], key: str, direction: str) -> list[list[Any]]:
    raw = args.get(key)
    if not isinstance(raw, list) or len(raw) > MAX_ITEMS:
        raise Refused(f"request field {key!r}: a list of at most {MAX_ITEMS} items")
    items: list[list[Any]] = []
    for item in raw:
        if direction == "in":
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[2], bool)):
                raise Refused(f"{key}: each item is [SRC, DEST, IS_DIR]")
            items.append([_absolute(item[0], "--stage-in SRC"), _rel(item[1], "DEST"), item[2]])
        else:
            if not (
                isinstance(item, list)
                and len(item) in (2, 3)
                and (len(item) == 2 or isinstance(item[2], bool))
            ):
                raise Refused(f"{key}: each item is [SRC, DEST, OVERWRITE]")
            overwrite = len(item) == 3 and item[2] is True
            items.append([_rel(item[0], "--stage-out SRC"), _absolute(item[1], "DEST"), overwrite])
    return items


def _rel(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise Refused(f"{what}: a path in the staging area")
    try:
        return area_path(value, what)
    except UsageError as exc:
        raise Refused(str(exc)) from None


# --- where areas are -------------------------------------------------------------------


def locate(
    region: StagingRegionSettings, transport: str, user: str, area_id: str
) -> tuple[str, str]:
    """The staging area (where the transfers put the data) and $CMSUB_STAGE_DIR."""
    if transport == "s3":
        area = s3_transport.area_of(region, user, area_id).url
        return area, area
    if not region.rsync_target:
        raise Refused(
            f"staging region {region.provider} has no rsync_target ([[staging.regions]]); "
            "use --transport s3 or ask your admin"
        )
    area = rsync_transport.area_of(region.rsync_target, user, area_id)
    if region.node_root:
        return area, rsync_transport.area_of(region.node_root, user, area_id)
    if rsync_transport.is_url(area):
        raise Refused(
            f"staging region {region.provider}: set node_root (where burst nodes mount the "
            "staging area)"
        )
    return area, area


def home_of(settings: Settings, row: Transfer) -> tuple[StagingRegionSettings, str] | None:
    """The region and staging root (`rsync_target`, or `s3://BUCKET/PREFIX`) whose
    `<root>/<user>/` holds the row's area; None when none does (a row not written by us)."""
    for region in settings.staging.regions:
        if row.transport == "s3" and region.s3_bucket:
            base = region.s3_prefix.strip("/")
            root = f"s3://{region.s3_bucket}" + (f"/{base}" if base else "")
        elif row.transport != "s3" and region.rsync_target:
            root = region.rsync_target.rstrip("/")
        else:
            continue
        try:
            areas.check_inside(row.stage_dir.rstrip("/"), root, row.user)
        except ClusterMgrError:
            continue
        return region, root
    return None


# --- the operations ----------------------------------------------------------------------


class Ledger:
    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self.ops: dict[str, Callable[[Account, dict[str, Any]], dict[str, Any]]] = {
            "create": self.create,
            "submitted": self.submitted,
            "forget": self.forget,
            "status": self.status,
            "begin": self.begin,
            "finish": self.finish,
            "cleaned": self.cleaned,
        }

    def handle(self, caller: Caller, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        args = request.get("args", {})
        if not isinstance(op, str) or op not in self.ops or not isinstance(args, dict):
            raise Refused(f"unknown request {str(op)[:40]!r} (known: {', '.join(self.ops)})")
        return self.ops[op](account_of(caller), args)

    def _owned(self, session: Session, who: Account, transfer_id: Any) -> Transfer:
        if not isinstance(transfer_id, int) or isinstance(transfer_id, bool):
            raise Refused("request field 'transfer': a transfer id")
        row = session.get(Transfer, transfer_id)
        if row is None or row.uid != who.uid:
            raise Refused(f"transfer {transfer_id} is not yours ({who.name}): refused")
        return row

    def _chain(self, session: Session, who: Account, stage_id: Any) -> list[Transfer]:
        if not isinstance(stage_id, str):
            raise Refused("request field 'stage_id': a stage id")
        rows = records.chain_rows(session, stage_id)
        if not rows or any(r.uid != who.uid for r in rows):
            raise Refused(f"stage {stage_id[:40]!r} is not yours ({who.name}): refused")
        return rows

    def create(self, who: Account, args: dict[str, Any]) -> dict[str, Any]:
        staging = self.settings.staging
        try:
            region = staging.region(_text(args, "region", optional=True) or None)
        except ConfigError as exc:
            raise Refused(str(exc)) from None
        transport = args.get("transport") or staging.default_transport
        if transport not in ("rsync", "s3"):
            raise Refused("request field 'transport': rsync or s3")
        in_items = _items(args, "stage_in", "in")
        out_items = _items(args, "stage_out", "out")
        wanted_bytes, wanted_files = _count(args, "bytes"), _count(args, "files")
        dry_run = bool(args.get("dry_run"))
        stage_id = uuid.uuid4().hex[:16]
        area, job_dir = locate(region, transport, who.name, stage_id)
        if transport == "rsync":
            areas.ensure_user_root(region.rsync_target, who.name, who.uid, who.gid)
            self._daemon_password(region, who)  # the director knows the user before the job
        with self.database.session() as session:
            try:
                check_quota(
                    who.name,
                    records.held_bytes(session, who.name),
                    wanted_bytes,
                    staging.quota_bytes,
                )
            except UsageError as exc:
                raise Refused(str(exc)) from None
            resumed = self._resumable(session, who, region, transport, in_items)
            resumes = ""
            if resumed is not None:
                area, job_dir = locate(region, transport, who.name, resumed[0])
                resumes = resumed[1].job_id
                if not dry_run:
                    resumed[1].cleaned_at = records.now()  # the area is the new chain's now
            in_id = out_id = 0
            if not dry_run:
                rows = [
                    self._row(who, stage_id, area, transport, "in", in_items, wanted_bytes),
                    self._row(who, stage_id, area, transport, "out", out_items, None),
                ]
                rows[0].files_total = wanted_files
                session.add_all(rows)
                session.flush()
                in_id, out_id = rows[0].id, rows[1].id
        return {
            "stage_id": stage_id,
            "in_id": in_id,
            "out_id": out_id,
            "area": area,
            "stage_dir": job_dir,
            "region": region.provider,
            "transport": transport,
            "resumes": resumes,
        }

    def _resumable(
        self,
        session: Session,
        who: Account,
        region: StagingRegionSettings,
        transport: str,
        in_items: list[list[Any]],
    ) -> tuple[str, Transfer] | None:
        """The caller's failed stage-in of the same items whose area is still there."""
        candidates = session.scalars(
            select(Transfer)
            .where(
                Transfer.uid == who.uid,
                Transfer.direction == "in",
                Transfer.state == "failed",
                Transfer.transport == transport,
                Transfer.cleaned_at.is_(None),
            )
            .order_by(Transfer.id.desc())
            .limit(20)
        ).all()
        for row in candidates:
            area_id = row.stage_dir.rstrip("/").rsplit("/", 1)[-1]
            if locate(region, transport, who.name, area_id)[0] == row.stage_dir and (
                list(row.items or []) == in_items
            ):
                return area_id, row
        return None

    @staticmethod
    def _row(
        who: Account,
        stage_id: str,
        area: str,
        transport: str,
        direction: str,
        items: list[list[Any]],
        bytes_total: int | None,
    ) -> Transfer:
        return Transfer(
            job_id="",
            user=who.name,
            uid=who.uid,
            direction=direction,
            source=" ".join(str(i[0]) for i in items)[:2000],
            destination=" ".join(str(i[1]) for i in items)[:2000],
            transport=transport,
            state="submitting",
            bytes_total=bytes_total,
            stage_id=stage_id,
            stage_dir=area,
            items=items,
        )

    def submitted(self, who: Account, args: dict[str, Any]) -> dict[str, Any]:
        ids = {k: _job_id(args.get(k), k) for k in ("stage_in_job", "job", "stage_out_job")}
        with self.database.session() as session:
            for row in self._chain(session, who, args.get("stage_id")):
                if row.state != "submitting":
                    raise Refused(f"stage {row.stage_id} was submitted already")
                row.job_id = ids["job"]
                row.transfer_job_id = ids[f"stage_{row.direction}_job"]
                row.state = "pending"
        return {}

    def forget(self, who: Account, args: dict[str, Any]) -> dict[str, Any]:
        with self.database.session() as session:
            for row in self._chain(session, who, args.get("stage_id")):
                if row.state == "submitting":
                    session.delete(row)
        return {}

    def status(self, who: Account, args: dict[str, Any]) -> dict[str, Any]:
        job = _job_id(args.get("job"), "job")
        with self.database.session() as session:
            found = session.scalars(
                select(Transfer)
                .where(
                    Transfer.uid == who.uid,
                    (Transfer.job_id == job) | (Transfer.transfer_job_id == job),
                )
                .limit(1)
            ).first()
            rows = [] if found is None else records.chain_rows(session, found.stage_id)
            shown = [records.view(r).row() for r in rows if r.uid == who.uid]
        return {"transfers": shown}

    def begin(self, who: Account, args: dict[str, Any]) -> dict[str, Any]:
        slurm_job = args.get("slurm_job") or ""
        with self.database.session() as session:
            row = self._owned(session, who, args.get("transfer"))
            if row.state in ("submitting", "cancelled"):
                raise Refused(f"transfer {row.id} is {row.state}: nothing to run")
            home = home_of(self.settings, row)
            if home is None:
                raise Refused(f"transfer {row.id}: its area {row.stage_dir!r} is not yours")
            region, root = home
            plan: dict[str, Any] = {
                "transfer": row.id,
                "direction": row.direction,
                "transport": row.transport,
                "user": row.user,
                "stage_id": row.stage_id,
                "area": row.stage_dir,
                "root": root,
                "items": list(row.items or []),
                "job": row.job_id,  # a stage-out's results go into DEST/<job>/
                # never began, in an area of its own (not a failed chain's it took over):
                # there is no manifest of an earlier run to read
                "fresh": row.started_at is None
                and row.stage_dir.rstrip("/").rsplit("/", 1)[-1] == row.stage_id,
            }
        if plan["transport"] == "s3":
            plan["s3"] = self._s3_access(region, who)
        if plan["transport"] == "rsync":
            areas.ensure_user_root(root, who.name, who.uid, who.gid)  # again: swapped since?
            secret = self._daemon_password(region, who)
            found = director.reach(self.settings, self.database, plan["area"])
            if not found.ready:  # its region's director is demand now: cm-scale brings it up
                with self.database.session() as session:
                    row = self._owned(session, who, args.get("transfer"))
                    row.state, row.error = director.WAITING, found.waiting_line()
                return {"wait": found.waiting_line()}
            plan["area"], plan["root"] = self._reachable(plan["area"], found, root)
            if secret:
                plan["rsync_password"] = secret  # the caller's own; in this answer only
        with self.database.session() as session:
            row = self._owned(session, who, args.get("transfer"))
            row.state = "running"
            row.started_at = records.now()
            row.error = None
            if slurm_job:
                row.transfer_job_id = _job_id(slurm_job, "slurm_job")
        return plan

    def finish(self, who: Account, args: dict[str, Any]) -> dict[str, Any]:
        error = args.get("error")
        if error is not None and not isinstance(error, str):
            raise Refused("request field 'error': a message")
        with self.database.session() as session:
            row = self._owned(session, who, args.get("transfer"))
            row.finished_at = records.now()
            direction, stage_id = row.direction, row.stage_id
            if error is not None:
                row.state, row.error = "failed", error[:2000]
            else:
                stats = {k: _count(args, k) for k in STATS}
                row.state = "done"
                row.bytes_total, row.bytes_done = stats["bytes_total"], stats["bytes_sent"]
                row.files_total, row.files_done = stats["files_total"], stats["files_sent"]
                row.files_verified = stats["files_total"]
            to_cancel: list[str] = []
            if error is not None and direction == "in":
                for other in records.chain_rows(session, stage_id):
                    if other.direction == "out" and other.uid == who.uid:
                        to_cancel = [i for i in (other.job_id, other.transfer_job_id) if i]
                        other.state = "cancelled"
                        other.error = f"stage-in failed: {error}"[:2000]
        clean = self._to_clean(who) if error is None and direction == "out" else []
        return {"cancel": to_cancel, "clean": clean}

    def _daemon_password(self, region: StagingRegionSettings, who: Account) -> str:
        """For a region staging on a director's rsync daemon: the caller's password, their
        line in the region's secrets file, and (a local provider's lab director, on this
        machine) their `<node_root>/<user>`, 0700, theirs. "" for a local directory."""
        if not rsyncd_auth.is_daemon_url(region.rsync_target) or region.rsyncd_secrets is None:
            return ""
        key = rsyncd_auth.staging_key(Path(self.settings.slurm.munge_key_path))
        secret = rsyncd_auth.grant(region.rsyncd_secrets, key, who.name)
        provider = self.settings.provider(region.provider)
        if provider.type == "local" and region.node_root:
            areas.ensure_user_root(region.node_root, who.name, who.uid, who.gid)
        return secret

    def _s3_access(self, region: StagingRegionSettings, who: Account) -> dict[str, Any]:
        """Temporary credentials for the caller's own prefix (never the provider's keys)."""
        duration = self.settings.staging.s3_credentials_s
        return s3_access.mint(self.settings.provider(region.provider), region, who.name, duration)

    def _to_clean(self, who: Account) -> list[dict[str, Any]]:
        cutoff = records.now() - timedelta(seconds=self.settings.staging.retention_s)
        found: list[dict[str, Any]] = []
        with self.database.session() as session:
            outs = session.scalars(
                select(Transfer).where(
                    Transfer.uid == who.uid,
                    Transfer.direction == "out",
                    Transfer.state == "done",
                    Transfer.cleaned_at.is_(None),
                    Transfer.finished_at <= cutoff,
                )
            ).all()
            for row in outs:
                home = home_of(self.settings, row)
                if home is None or row.user != who.name:
                    log.warning(
                        "transfer %d: area %r is not inside %s's staging area: not cleaned",
                        row.id,
                        row.stage_dir[:200],
                        who.name,
                    )
                    continue
                found.append(
                    {
                        "stage_id": row.stage_id,
                        "area": row.stage_dir,
                        "root": home[1],
                        "transport": row.transport,
                        "region": home[0].provider,
                    }
                )
        reachable: list[dict[str, Any]] = []
        for item in found:
            if item["transport"] == "s3":
                item["s3"] = self._s3_access(self.settings.staging.region(item["region"]), who)
            if item["transport"] == "rsync":
                where = director.reach(self.settings, self.database, item["area"])
                if not where.ready:
                    continue  # cleaned at a later stage-out
                item["area"], item["root"] = self._reachable(item["area"], where, item["root"])
            reachable.append(item)
        return reachable

    @staticmethod
    def _reachable(area: str, found: director.Reach, root: str) -> tuple[str, str]:
        """The area and its root, `{director}` replaced by the READY director's address."""
        if not found.address:
            return found.area, root
        return found.area, root.replace(director.PLACEHOLDER, found.address)

    def cleaned(self, who: Account, args: dict[str, Any]) -> dict[str, Any]:
        stage_ids = args.get("stage_ids")
        if not isinstance(stage_ids, list) or len(stage_ids) > MAX_ITEMS:
            raise Refused("request field 'stage_ids': a list of stage ids")
        with self.database.session() as session:
            for stage_id in stage_ids:
                for row in self._chain(session, who, stage_id):
                    row.cleaned_at = records.now()
        return {}

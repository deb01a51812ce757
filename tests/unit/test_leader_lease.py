"""The leader lease and its fence on a real SQLite database (runtime/leader.py): a lease
that is not renewed runs out and another head takes it one generation up; the old
holder's writes are refused in their own transaction; a holder whose process is gone
(its session lock free) is replaced before its lease runs out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select

from clustermgr.core.progress_marks import Progress
from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent
from clustermgr.runtime.leader import FileLock, Lease, LeaseLostError, make_lock

LEASE_S = 0.6


def head(database: Database, tmp_path: Path, name: str) -> Lease:
    """A daemon with a state directory of its own; the flock beside the database is one
    for all (so a frozen holder keeps it, and the other waits for the lease to run out)."""
    return make_lock(database, f"cm-scale@{name}:1", LEASE_S, tmp_path / name)


def events(database: Database) -> list[str]:
    with database.session() as session:
        return list(session.scalars(select(ClusterEvent.message).order_by(ClusterEvent.id)))


def write(database: Database, message: str) -> None:
    with database.session() as session:
        session.add(ClusterEvent(kind="test", source="test", message=message))


def test_a_lease_not_renewed_runs_out_and_the_other_head_takes_it_one_generation_up(
    sqlite_db: Database, tmp_path: Path
) -> None:
    first, second = head(sqlite_db, tmp_path, "a"), head(sqlite_db, tmp_path, "b")
    assert first.try_acquire()
    assert not second.try_acquire()  # held and renewed: one leader
    assert "cm-scale@a:1" in second.holder()
    time.sleep(LEASE_S / 2)
    assert first.still_leader()  # a renewal pushes the end out again
    time.sleep(LEASE_S / 2)
    assert not second.try_acquire()
    assert first.generation == 1
    time.sleep(LEASE_S + 0.1)  # the first head is "frozen": no renewal
    assert not first.valid_locally()
    assert second.try_acquire()
    assert second.generation == 2
    assert second.took_from is not None and second.took_from.holder == "cm-scale@a:1"
    assert not first.still_leader()  # it wakes: the lease is not its own any more
    assert first.lost_why.startswith("taken over by cm-scale@b:1 (generation 2")
    assert first.generation is None and not first.try_acquire()


def test_a_woken_leaders_write_is_refused_in_its_own_transaction(
    sqlite_db: Database, tmp_path: Path
) -> None:
    first, second = head(sqlite_db, tmp_path, "a"), head(sqlite_db, tmp_path, "b")
    assert first.try_acquire()
    first_writes = sqlite_db.fenced(first.fence)
    write(first_writes, "while leading")
    time.sleep(LEASE_S + 0.1)
    with pytest.raises(LeaseLostError, match="no longer holds the leader lease"):
        write(first_writes, "ran out, nobody took over yet")  # an expired lease fences too
    assert second.try_acquire()
    # the woken leader still believes it holds generation 1: its write is refused
    with pytest.raises(LeaseLostError, match=r"cm-scale@a:1 .*generation 1"):
        write(first_writes, "after the takeover")
    write(sqlite_db.fenced(second.fence), "the new leader")
    assert events(sqlite_db) == ["while leading", "the new leader"]


def test_a_holder_whose_process_is_gone_is_replaced_before_its_lease_runs_out(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """Both heads on one host share the flock file: the holder's death frees it at once."""
    shared = tmp_path / "state" / "leader" / "cm-scale.lock"
    first = Lease(sqlite_db, "cm-scale@a:1", 60.0, FileLock(shared))
    second = Lease(sqlite_db, "cm-scale@b:1", 60.0, FileLock(shared))
    assert first.try_acquire()
    assert not second.try_acquire()
    first.session_lock.drop()  # as the kernel does when the process dies (SIGKILL)
    assert second.try_acquire()
    assert second.generation == 2
    assert not first.still_leader()


def test_a_clean_release_hands_the_lease_over_at_once(sqlite_db: Database, tmp_path: Path) -> None:
    first = Lease(sqlite_db, "cm-scale@a:1", 60.0, FileLock(tmp_path / "cm-scale.lock"))
    second = Lease(sqlite_db, "cm-scale@b:1", 60.0, FileLock(tmp_path / "cm-scale.lock"))
    assert first.try_acquire()
    assert not second.try_acquire()
    first.release()
    assert second.try_acquire()
    with pytest.raises(LeaseLostError):
        write(sqlite_db.fenced(first.fence), "after release")


def test_the_gate_refuses_a_step_once_the_lease_ran_out_by_the_local_clock(
    sqlite_db: Database, tmp_path: Path
) -> None:
    """The check a cycle makes before each Slurm command and cloud call (progress marks):
    no round trip, and a frozen process's monotonic clock runs on."""
    lease = head(sqlite_db, tmp_path, "a")
    assert lease.try_acquire()
    progress = Progress()
    calls: list[str] = []

    def gate(what: str) -> None:
        if not lease.valid_locally():
            raise LeaseLostError(f"{what} not done")
        calls.append(what)

    progress.gate = gate
    progress.step("provider aws1: EC2 CreateFleet")
    time.sleep(LEASE_S + 0.1)
    with pytest.raises(LeaseLostError, match="CreateTags not done"):
        progress.step("provider aws1: EC2 CreateTags")
    assert calls == ["provider aws1: EC2 CreateFleet"]

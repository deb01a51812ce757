from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from clustermgr.core.errors import IllegalTransitionError
from clustermgr.db.database import Database
from clustermgr.db.models import Provider
from clustermgr.directors.states import (
    ALLOWED,
    DirectorState,
    director_name,
    ensure,
    find,
    region_of,
    transition,
)

AT = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


@pytest.fixture
def database(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    db.upgrade()
    with db.session() as session:
        session.add(
            Provider(name="aws-east", type="aws", region="us-east-1", credentials_source="env")
        )
    return db


def test_every_state_has_a_row_and_no_self_loops() -> None:
    assert set(ALLOWED) == set(DirectorState)
    for state, targets in ALLOWED.items():
        assert state not in targets


def test_names_are_dns_labels() -> None:
    assert director_name("aws-east", "us-east-1") == "director-aws-east-us-east-1"
    assert director_name("My_Cloud", "West Europe") == "director-my-cloud-west-europe"


def test_ensure_makes_one_stopped_director_per_region_and_moves_record_events(
    database: Database,
) -> None:
    with database.session() as session:
        first = ensure(session, "aws-east", "us-east-1", actor="test", now=AT)
        again = ensure(session, "aws-east", "us-east-1", actor="test")
        assert first.id == again.id and first.state == "stopped"
        transition(first, DirectorState.LAUNCHING, "burst node requested", "cm-scale", now=AT)
        transition(first, DirectorState.BOOTING, "i-123 running", "cm-scale", now=AT)
    with database.session() as session:
        director = find(session, "director-aws-east-us-east-1")
        assert director is not None and director.state == "booting"
        assert region_of(session, director) == ("aws-east", "us-east-1")
        assert [(e.old_state, e.new_state, e.reason) for e in director.events] == [
            ("stopped", "launching", "burst node requested"),
            ("launching", "booting", "i-123 running"),
        ]


def test_an_illegal_move_names_the_director_and_changes_nothing(database: Database) -> None:
    with database.session() as session:
        director = ensure(session, "aws-east", "us-east-1", actor="test")
        with pytest.raises(IllegalTransitionError, match="stopped -> ready"):
            transition(director, DirectorState.READY, "x", "test")
        assert director.state == "stopped" and director.events == []


def test_ensure_without_the_provider_row_says_what_to_run(database: Database) -> None:
    with database.session() as session, pytest.raises(LookupError, match="nodes sync"):
        ensure(session, "nowhere", "r1", actor="test")

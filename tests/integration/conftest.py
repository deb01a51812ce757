"""Fixtures the LDAP replication tests share (plain and TLS): slapd servers started and
stopped by pid, and a database with one director at 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from clustermgr.db.database import Database
from clustermgr.db.models import Provider
from clustermgr.directors.states import ensure
from tests.conftest import cannot_run
from tests.services.slapd import (
    Slapd,
    SlapdUnavailable,
    available,
    director_replica,
    make_server,
)

Factory = Callable[..., Slapd]


@pytest.fixture
def slapd(tmp_path: Path) -> Iterator[Factory]:
    """Makes and starts slapd servers; every one is stopped by pid at teardown. With
    `director=True`, a director's replica as the local provider configures it."""
    why = available()
    if why:
        cannot_run(f"slapd: {why}")
    made: list[Slapd] = []

    def start(name: str, **kwargs: Any) -> Slapd:
        try:
            if kwargs.pop("director", False):
                server = director_replica(tmp_path / name, **kwargs)
            else:
                server = make_server(tmp_path / name, **kwargs)
            made.append(server)
            server.start()
        except SlapdUnavailable as exc:
            cannot_run(f"slapd: {exc}")
        return server

    yield start
    for server in made:
        server.destroy()


@pytest.fixture
def database(tmp_path: Path) -> Database:
    """A database with one director at 127.0.0.1 (its slapd's port is in the settings)."""
    db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    db.upgrade()
    with db.session() as session:
        session.add(Provider(name="lab", type="local", region="local", credentials_source="none"))
        session.flush()
        director = ensure(session, "lab", "local", actor="test")
        director.private_address = "127.0.0.1"
    return db

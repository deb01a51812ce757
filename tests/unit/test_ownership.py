"""Only what cm-scale launched is cm-scale's to terminate: the orphan sweep against the
database's proof (issued request ids, recorded instance ids), foreign instances reported
once and left alone, the proof committed before the launch call (crash safety)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, text

from clustermgr.db.database import Database
from clustermgr.db.models import ClusterEvent, ForeignInstance, LaunchRequest
from clustermgr.db.ownership import Ownership
from clustermgr.directors.strays import ROLE_DIRECTOR, TAG_ROLE
from clustermgr.nodes.inventory import sync_nodes
from clustermgr.nodes.states import NodeState
from clustermgr.providers.base import (
    TAG_NODE,
    TAG_REQUEST,
    TAG_TEMPLATE,
    CloudInstance,
    InstanceState,
)
from clustermgr.scaling.actor import Actor
from clustermgr.scaling.clamp import LaunchOrder
from clustermgr.scaling.observe import Snapshot, read_ownership, template_views
from clustermgr.scaling.ownership import printable, sweep
from clustermgr.scaling.reconcile import reconcile
from clustermgr.scaling.specs import LaunchSpecs
from clustermgr.scaling.verdicts import Verdict
from clustermgr.workload.base import WorkloadSnapshot
from clustermgr.workload.slurm import SlurmCli
from tests.unit.test_verdicts import SETTINGS, record

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def instance(
    iid: str,
    request: str | None,
    age_s: float = 900,
    node: str | None = None,
    state: InstanceState = InstanceState.RUNNING,
    **tags: str,
) -> CloudInstance:
    all_tags = {TAG_TEMPLATE: "gpu", **tags}
    if request is not None:
        all_tags[TAG_REQUEST] = request
    if node is not None:
        all_tags[TAG_NODE] = node
    return CloudInstance(
        iid, node, state, "10.0.0.9", "p4d.24xlarge", None, "on-demand",
        NOW - timedelta(seconds=age_s), all_tags,
    )  # fmt: skip


def listing(*instances: CloudInstance) -> dict[str, dict[str, CloudInstance]]:
    return {"aws1": {i.instance_id: i for i in instances}}


def test_an_instance_that_only_carries_the_tags_is_foreign_at_any_age_never_an_orphan() -> None:
    listed = listing(
        instance("i-forged", "r-forged"),
        instance("i-new-forged", "r-forged", age_s=1),
        instance("i-no-request", None),
        instance("i-ours", "r-1"),
        instance("i-ours-young", "r-1", age_s=10),
        instance("i-recorded", "r-before-upgrade"),
        instance("i-gone", "r-forged", state=InstanceState.TERMINATED),
    )
    ours = Ownership(issued=frozenset({"r-1"}), recorded=frozenset({"i-recorded"}))
    found = sweep(listed, ours, set(), frozenset(), NOW, grace_s=300)
    assert found.orphans == {"aws1": ["i-ours", "i-recorded"]}
    assert [f.instance_id for f in found.foreign["aws1"]] == [
        "i-forged",
        "i-new-forged",
        "i-no-request",
    ]
    forged = found.foreign["aws1"][0]
    assert (forged.template, forged.request_id, forged.role) == ("gpu", "r-forged", "")


def test_a_director_tag_exempts_nothing_a_director_row_does() -> None:
    director = {TAG_ROLE: ROLE_DIRECTOR}
    listed = listing(
        instance("i-forged", "d-forged", **director),
        instance("i-lost", "d-1", **director),
        instance("i-held", "d-2", **director),
        instance("i-launching", "d-3", **director),
    )
    ours = Ownership(issued=frozenset({"d-1", "d-2", "d-3"}))
    found = sweep(listed, ours, {"i-held"}, frozenset({"d-3"}), NOW, grace_s=300)
    assert found.orphans == {"aws1": ["i-lost"]}
    [forged] = found.foreign["aws1"]
    assert (forged.instance_id, forged.role) == ("i-forged", ROLE_DIRECTOR)
    assert "role tag director" in forged.describe()


def test_on_prem_listings_are_neither_orphans_nor_foreign() -> None:
    found = sweep(
        listing(instance("node7", None)),
        Ownership(),
        set(),
        frozenset(),
        NOW,
        0,
        frozenset({"aws1"}),
    )
    assert found.orphans == {} and found.foreign == {}


def test_tag_values_are_escaped_and_cut_before_they_are_stored_or_printed() -> None:
    assert printable("gpu\nINFO cm-scale: cycle ok") == "gpu\\u000aINFO cm-scale: cycle ok"
    assert printable("a\u2028b\x1b[31m") == "a\\u2028b\\u001b[31m"
    assert printable("x" * 300) == "x" * 128
    assert printable(None) == ""
    listed = listing(instance("i-1", "r\nforged", **{TAG_ROLE: "d" * 100}))
    [found] = sweep(listed, Ownership(), set(), frozenset(), NOW, 0).foreign["aws1"]
    assert found.request_id == "r\\u000aforged" and len(found.role) == 64


def test_a_forged_instance_named_after_a_launching_node_is_not_adopted() -> None:
    """The node waits for its own request's instance: one with another request id but the
    node's name tag is foreign, so the launch is re-issued rather than the forgery bound."""
    launching = record("g1", NodeState.LAUNCHING, request_id="r-1", launched_at=None)
    snapshot = Snapshot(
        now=NOW,
        workload=WorkloadSnapshot(NOW, {}),
        nodes={"g1": launching},
        instances=listing(instance("i-forged", "r-forged", node="g1")),
        ownership=Ownership(issued=frozenset({"r-1"})),
    )
    found = reconcile(SETTINGS, snapshot, orphan_grace_s=0)
    assert found.verdicts["g1"].verdict is Verdict.RELAUNCH
    assert found.relaunch == {"r-1": ["g1"]}
    assert found.orphans == {}
    assert [f.instance_id for f in found.foreign["aws1"]] == ["i-forged"]
    mine = replace(snapshot, instances=listing(instance("i-mine", "r-1", node="g1", age_s=5)))
    assert reconcile(SETTINGS, mine, 0).verdicts["g1"].verdict is Verdict.ADOPT


# --- through the database ------------------------------------------------------------------


@pytest.fixture
def database(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    db.upgrade()
    with db.session() as session:
        sync_nodes(session, SETTINGS, None, now=NOW)
    return db


def actor(database: Database, clock: list[datetime]) -> Actor:
    workload = SlurmCli(SETTINGS.slurm.bin_dir, SETTINGS.slurm.command_timeout_s)  # never called
    specs = LaunchSpecs(SETTINGS, lambda: clock[0])
    return Actor(template_views(SETTINGS), database, workload, {}, lambda: clock[0], specs)


def ownership_of(database: Database, listed: dict[str, dict[str, CloudInstance]]) -> Ownership:
    with database.session() as session:
        return read_ownership(session, listed, set(), frozenset(), frozenset())


def test_the_request_id_is_issued_with_the_launch_intent_so_a_crash_leaves_it_provable(
    database: Database,
) -> None:
    """begin_launch commits LAUNCHING and the issued request id in one transaction, before
    any cloud call: if cm-scale dies right after the launch, and the node later moves on
    (failed, request id cleared), the instance is still provably ours."""
    order = LaunchOrder("gpu", ("g1",), "on-demand", "r-7", "test")
    actor(database, [NOW]).begin_launch(order)
    with database.session() as session:
        issued = session.get(LaunchRequest, "r-7")
        assert issued is not None and (issued.kind, issued.provider, issued.owner) == (
            "node",
            "aws1",
            "gpu",
        )
    listed = listing(instance("i-ours", "r-7"), instance("i-forged", "r-8"))
    ours = ownership_of(database, listed)
    assert ours.issued == {"r-7"}
    found = sweep(listed, ours, set(), frozenset(), NOW, 300)
    assert found.orphans == {"aws1": ["i-ours"]}
    assert [f.instance_id for f in found.foreign["aws1"]] == ["i-forged"]
    actor(database, [NOW]).begin_launch(order)  # re-issued whole: one record still
    with database.session() as session:
        assert len(session.scalars(select(LaunchRequest)).all()) == 1


def events(database: Database) -> list[str]:
    with database.session() as session:
        query = select(ClusterEvent.message).where(ClusterEvent.kind == "foreign")
        return list(session.scalars(query.order_by(ClusterEvent.id)))


def test_a_foreign_instance_is_recorded_once_with_its_first_sighting_and_forgotten_when_gone(
    database: Database,
) -> None:
    clock = [NOW]
    act = actor(database, clock)
    listed = listing(instance("i-forged", "r-forged", **{TAG_ROLE: ROLE_DIRECTOR}))
    for minute in range(3):
        clock[0] = NOW + timedelta(minutes=minute)
        found = sweep(listed, ownership_of(database, listed), set(), frozenset(), clock[0], 0)
        new, gone = act.note_foreign(found.foreign, {"aws1"})
        assert ([f.instance_id for f in new], gone) == (
            (["i-forged"], []) if minute == 0 else ([], [])
        )
    assert events(database) == [
        "foreign instance aws1 i-forged (template tag gpu, request tag r-forged, role tag "
        "director): tagged as this cluster's, not launched by cm-scale: left alone"
    ]
    with database.session() as session:
        [row] = session.scalars(select(ForeignInstance)).all()
        assert (row.first_seen_at, row.last_seen_at) == (NOW, NOW + timedelta(minutes=2))
    act.note_foreign({}, set())  # aws1 not listed this cycle: nothing known changes
    with database.session() as session:
        assert len(session.scalars(select(ForeignInstance)).all()) == 1
    assert act.note_foreign({}, {"aws1"}) == ([], ["aws1 i-forged"])
    assert events(database)[-1] == "foreign instance aws1 i-forged no longer listed as foreign"
    with database.session() as session:
        assert session.scalars(select(ForeignInstance)).all() == []


def test_the_upgrade_records_the_request_ids_rows_hold_as_issued(tmp_path: Path) -> None:
    """A launch in flight across the upgrade (a LAUNCHING node's request id) stays ours."""
    from alembic import command

    from clustermgr.db.database import alembic_config

    db = Database(f"sqlite:///{tmp_path / 'old.db'}")
    with db.engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0007")
        conn.execute(
            text(
                "INSERT INTO nodes (name, kind, state, state_reason, state_since, template, "
                "provider, partitions, request_id, cpus, memory_mb, gpus, slurm_state, "
                "created_at, updated_at, version) VALUES ('g1', 'cloud', 'LAUNCHING', '', "
                ":now, 'gpu', 'aws1', 'gpu', 'r-inflight', 8, 64000, 0, '', :now, :now, 1)"
            ),
            {"now": NOW},
        )
    db.upgrade()
    assert ownership_of(db, listing(instance("i-1", "r-inflight"))).issued == {"r-inflight"}
    db.dispose()


def test_the_metric_counts_foreign_instances_per_listed_provider() -> None:
    from clustermgr.runtime.metrics import Metrics
    from clustermgr.scaling.engine import CycleReport
    from clustermgr.scaling.reconcile import Judgment

    metrics = Metrics()
    metrics.prime([("gpu", "aws1"), ("cpu", "os1")], [])
    listed = listing(instance("i-1", "r-x"), instance("i-2", None))
    found = sweep(listed, Ownership(), set(), frozenset(), NOW, 0).foreign

    def gauge(provider: str) -> float | None:
        labels = {"provider": provider}
        return metrics.registry.get_sample_value("clustermgr_foreign_instances", labels)

    assert (gauge("aws1"), gauge("os1")) == (0.0, 0.0)
    metrics.observe_foreign(CycleReport(NOW, judgment=Judgment(foreign=found)))
    assert (gauge("aws1"), gauge("os1")) == (2.0, 0.0)
    unlisted = CycleReport(NOW, judgment=Judgment(), provider_errors={"aws1": "timeout"})
    metrics.observe_foreign(unlisted)  # aws1 not listed: its count stands
    assert (gauge("aws1"), gauge("os1")) == (2.0, 0.0)
    metrics.observe_foreign(CycleReport(NOW, judgment=Judgment()))  # gone
    assert gauge("aws1") == 0.0


def test_instance_ids_alike_once_escaped_and_cut_make_one_row_not_a_failed_cycle(
    database: Database,
) -> None:
    long_a, long_b = "i-" + "x" * 130 + "a", "i-" + "x" * 130 + "b"
    listed = listing(instance(long_a, "r-x"), instance(long_b, "r-y"))
    found = sweep(listed, Ownership(), set(), frozenset(), NOW, 0).foreign
    new, _ = actor(database, [NOW]).note_foreign(found, {"aws1"})
    assert [f.instance_id for f in new] == ["i-" + "x" * 126]
    assert len(events(database)) == 1

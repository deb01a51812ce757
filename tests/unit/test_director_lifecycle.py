"""The director lifecycle's decisions (pure functions over typed inputs), its config, the
engine gate (clamp and the view with real settings) and the node orphan sweep's exception."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from clustermgr.config import DirectorSettings, Settings, parse_settings
from clustermgr.core.errors import ConfigError
from clustermgr.db.ownership import Ownership
from clustermgr.directors.health import DirectorInfo, HealthResult
from clustermgr.directors.lifecycle import (
    Action,
    CloudFacts,
    after_check,
    cloud_facts,
    decide,
    launch_spec,
    waiting_reason,
)
from clustermgr.directors.states import DirectorState
from clustermgr.directors.strays import ROLE_DIRECTOR, TAG_ROLE, orphan_directors
from clustermgr.nodes.states import NodeState
from clustermgr.policy.decision import Launch, ScaleDecision
from clustermgr.policy.view import ClusterView, NodeView
from clustermgr.providers.base import TAG_REQUEST, CloudInstance, InstanceState
from clustermgr.scaling.clamp import clamp
from clustermgr.scaling.directors import providers_in_demand, waiting_summary, with_waits
from clustermgr.scaling.observe import Snapshot, template_views
from clustermgr.scaling.reconcile import reconcile
from clustermgr.workload.base import PendingJob, WorkloadNode, WorkloadSnapshot

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
D = DirectorState
CONFIG: dict[str, Any] = {
    "providers": [
        {"name": "aws-east", "type": "aws", "region": "us-east-1"},
        {"name": "local", "type": "local", "region": "here"},
    ],
    "templates": [
        {
            "name": "aws-cpu",
            "provider": "aws-east",
            "partition": "cloud",
            "nodes": "aws-[1-4]",
            "instance_types": ["c5.large"],
            "image": "ami-1",
            "cpus": 2,
            "memory_mb": 1000,
        },
        {
            "name": "local-cpu",
            "provider": "local",
            "partition": "cloud",
            "nodes": "lc-[1-4]",
            "instance_types": ["local.cpu"],
            "image": "local",
            "cpus": 2,
            "memory_mb": 1000,
        },
    ],
    "directors": [
        {
            "provider": "aws-east",
            "instance_type": "m5.large",
            "image": "ami-dir",
            "idle_stop_after_s": 600,
            "boot_timeout_s": 300,
            "health_interval_s": 60,
            "lost_after_failed_checks": 3,
        }
    ],
}
SETTINGS = parse_settings(CONFIG)
SPEC = SETTINGS.directors[0]
NAME = "director-aws-east-us-east-1"


def info(state: DirectorState, **fields: Any) -> DirectorInfo:
    base: dict[str, Any] = {
        "id": 1,
        "name": NAME,
        "provider": "aws-east",
        "region": "us-east-1",
        "state": state,
        "state_since": NOW - timedelta(seconds=30),
        "launched_at": NOW - timedelta(seconds=30),
    }
    return DirectorInfo(**{**base, **fields})


def instance(
    iid: str = "i-1",
    state: InstanceState = InstanceState.RUNNING,
    address: str | None = "10.0.0.5",
    request: str = "d-1",
    director: bool = True,
    age_s: float = 30,
) -> CloudInstance:
    tags = {TAG_REQUEST: request, **({TAG_ROLE: ROLE_DIRECTOR} if director else {})}
    return CloudInstance(
        iid, NAME, state, address, "m5.large", "us-east-1a", "on-demand",
        NOW - timedelta(seconds=age_s), tags,
    )  # fmt: skip


def seen(*instances: CloudInstance) -> dict[str, CloudInstance]:
    return {i.instance_id: i for i in instances}


# --- config ----------------------------------------------------------------------------


def test_a_director_defaults_to_required_with_the_standard_ports() -> None:
    assert SPEC.required and SPEC.health_ports == [389, 636, 873]
    assert SETTINGS.director("aws-east") is SPEC and SETTINGS.director("local") is None


@pytest.mark.parametrize(
    ("director", "message"),
    [
        ({"provider": "nope"}, "directors[0:nope]: provider 'nope' is not defined"),
        ({"provider": "aws-east", "region": "eu-west-1"}, "region 'eu-west-1' is not provider"),
        ({"provider": "aws-east", "health_ports": [0]}, "health_ports: 0 is not a TCP port"),
    ],
)
def test_bad_directors_are_one_line_config_errors(director: dict[str, Any], message: str) -> None:
    data = {**CONFIG, "directors": [{"instance_type": "m5.large", "image": "a", **director}]}
    with pytest.raises(ConfigError, match="directors") as caught:
        parse_settings(data)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_director_for_a_region_without_templates_is_a_config_error() -> None:
    providers = [*CONFIG["providers"], {"name": "spare", "type": "aws", "region": "us-west-2"}]
    data = {
        **CONFIG,
        "providers": providers,
        "directors": [{"provider": "spare", "instance_type": "m5.large", "image": "a"}],
    }
    with pytest.raises(ConfigError, match="no template uses provider 'spare'"):
        parse_settings(data)


def test_two_directors_for_one_region_are_a_config_error() -> None:
    data = {**CONFIG, "directors": CONFIG["directors"] * 2}
    with pytest.raises(ConfigError, match="a second director for provider 'aws-east'"):
        parse_settings(data)


# --- decide ------------------------------------------------------------------------------


def test_a_stopped_director_launches_on_demand_only() -> None:
    stopped = info(D.STOPPED)
    assert decide(SPEC, stopped, CloudFacts(True), True, NOW).action is Action.LAUNCH
    assert decide(SPEC, stopped, CloudFacts(True), False, NOW).action is Action.NOTHING


def test_a_launch_interrupted_before_its_commit_is_adopted_or_reissued() -> None:
    launching = info(D.LAUNCHING, request_id="d-1")
    found = cloud_facts(seen(instance(request="d-1")), launching)
    step = decide(SPEC, launching, found, True, NOW)
    assert step.action is Action.ADOPT and step.instance is not None
    nothing = cloud_facts(seen(instance(request="d-other")), launching)
    assert decide(SPEC, launching, nothing, True, NOW).action is Action.RELAUNCH
    late = info(D.LAUNCHING, request_id="d-1", launched_at=NOW - timedelta(seconds=301))
    assert decide(SPEC, late, nothing, True, NOW).action is Action.LOSE


def test_booting_checks_once_running_with_an_address_and_times_out() -> None:
    booting = info(D.BOOTING, instance_id="i-1")
    pending = cloud_facts(seen(instance(state=InstanceState.PENDING, address=None)), booting)
    assert decide(SPEC, booting, pending, True, NOW).action is Action.NOTHING
    running = cloud_facts(seen(instance()), booting)
    assert decide(SPEC, booting, running, True, NOW).action is Action.CHECK
    late = info(D.BOOTING, instance_id="i-1", launched_at=NOW - timedelta(seconds=300))
    step = decide(SPEC, late, running, True, NOW)
    assert step.action is Action.LOSE and "boot_timeout_s = 300" in step.reason


@pytest.mark.parametrize("state", [D.BOOTING, D.SYNCING, D.READY, D.UNHEALTHY])
@pytest.mark.parametrize("gone", [None, InstanceState.TERMINATED, InstanceState.ERROR])
def test_a_live_director_whose_instance_is_gone_is_lost(
    state: DirectorState, gone: InstanceState | None
) -> None:
    director = info(state, instance_id="i-1")
    listing = seen() if gone is None else seen(instance(state=gone))
    step = decide(SPEC, director, cloud_facts(listing, director), True, NOW)
    assert step.action is Action.LOSE and "i-1" in step.reason


def test_nothing_is_judged_when_the_provider_could_not_be_listed() -> None:
    director = info(D.READY, instance_id="i-1")
    assert decide(SPEC, director, cloud_facts(None, director), True, NOW).action is Action.NOTHING


def test_lost_is_replaced_with_demand_and_retired_without() -> None:
    lost = info(D.LOST, instance_id="i-1")
    assert decide(SPEC, lost, CloudFacts(True), True, NOW).action is Action.REPLACE
    assert decide(SPEC, lost, CloudFacts(True), False, NOW).action is Action.RETIRE


def test_ready_is_checked_every_health_interval() -> None:
    fresh = info(D.READY, instance_id="i-1", healthy_at=NOW - timedelta(seconds=10))
    listing = cloud_facts(seen(instance()), fresh)
    assert decide(SPEC, fresh, listing, True, NOW).action is Action.NOTHING
    due = info(D.READY, instance_id="i-1", healthy_at=NOW - timedelta(seconds=60))
    assert decide(SPEC, due, listing, True, NOW).action is Action.CHECK


def test_an_idle_region_stops_its_director_after_idle_stop_after_s() -> None:
    idle = info(D.READY, instance_id="i-1", idle_since=NOW - timedelta(seconds=600))
    listing = cloud_facts(seen(instance()), idle)
    step = decide(SPEC, idle, listing, False, NOW)
    assert step.action is Action.STOP and "idle for 600 s" in step.reason
    assert decide(SPEC, idle, listing, True, NOW).action is Action.CHECK  # demand is back
    never = DirectorSettings(provider="aws-east", instance_type="m5.large", image="a")
    assert decide(never, idle, listing, False, NOW).action is Action.CHECK


def test_a_director_removed_from_the_config_is_stopped() -> None:
    ready = info(D.READY, instance_id="i-1")
    assert decide(None, ready, CloudFacts(True), False, NOW).action is Action.STOP
    assert decide(None, info(D.STOPPED), CloudFacts(True), True, NOW).action is Action.NOTHING
    stopping = info(D.STOPPING, instance_id="i-1")
    assert decide(SPEC, stopping, CloudFacts(True), True, NOW).action is Action.FINISH_STOP


# --- after a check -----------------------------------------------------------------------

UP = HealthResult(True, True, "answers on 389,636,873; replicas in sync")
BEHIND = HealthResult(True, False, "image base r2 not verified (syncing)")
DEAD = HealthResult(False, False, "10.0.0.5: no answer on port 389")


@pytest.mark.parametrize(
    ("state", "result", "expected"),
    [
        (D.BOOTING, UP, D.SYNCING),  # the lifecycle moves it on to READY in the same pass
        (D.BOOTING, BEHIND, D.SYNCING),
        (D.BOOTING, DEAD, D.BOOTING),  # not up yet: the boot timeout decides
        (D.SYNCING, UP, D.READY),
        (D.SYNCING, BEHIND, D.SYNCING),
        (D.SYNCING, DEAD, D.UNHEALTHY),
        (D.READY, UP, D.READY),
        (D.READY, BEHIND, D.SYNCING),
        (D.READY, DEAD, D.UNHEALTHY),
        (D.UNHEALTHY, UP, D.READY),
        (D.UNHEALTHY, BEHIND, D.SYNCING),
        (D.UNHEALTHY, DEAD, D.UNHEALTHY),
    ],
)
def test_a_check_moves_the_director(
    state: DirectorState, result: HealthResult, expected: DirectorState
) -> None:
    new, reason = after_check(SPEC, info(state), result, NOW)
    assert new is expected and result.detail in reason


def test_unhealthy_for_the_allowed_number_of_checks_is_lost() -> None:
    allowed = SPEC.lost_after_failed_checks * SPEC.health_interval_s
    sick = info(D.UNHEALTHY, state_since=NOW - timedelta(seconds=allowed))
    new, reason = after_check(SPEC, sick, DEAD, NOW)
    assert new is D.LOST and "unhealthy for 180 s" in reason


# --- the launch and the orphans ----------------------------------------------------------


def test_the_launch_spec_tags_the_instance_as_a_director() -> None:
    spec = launch_spec(SPEC, NAME)
    assert spec.tags == {TAG_ROLE: ROLE_DIRECTOR}
    assert spec.node_names == (NAME,) and spec.instance_types == ("m5.large",)


def test_director_instances_no_row_holds_are_orphans_after_the_grace_period() -> None:
    rows = [info(D.READY, instance_id="i-held"), info(D.LAUNCHING, request_id="d-now")]
    listings = {
        "aws-east": seen(
            instance("i-held", age_s=900),
            instance("i-stray", request="d-old", age_s=900),
            instance("i-young", request="d-old", age_s=10),
            instance("i-inflight", request="d-now", age_s=900),
            instance("i-node", request="r-1", director=False, age_s=900),
        )
    }
    ours = Ownership(issued=frozenset({"d-old", "d-now", "r-1"}))
    assert orphan_directors(listings, rows, NOW, 300, ours) == {"aws-east": ["i-stray"]}


def test_a_director_tag_on_an_instance_cm_scale_never_launched_gets_it_terminated_by_nobody() -> (
    None
):
    """The tag is anyone's to set: a director instance is cleaned up only when its request
    id was issued (or its instance id recorded) by this cluster's database."""
    listings = {
        "aws-east": seen(
            instance("i-forged", request="d-forged", age_s=900),
            instance("i-untagged-request", request="", age_s=900),
            instance("i-recorded", request="d-gone", age_s=900),
        )
    }
    ours = Ownership(recorded=frozenset({"i-recorded"}))
    assert orphan_directors(listings, [], NOW, 300, ours) == {"aws-east": ["i-recorded"]}


def test_the_node_sweep_leaves_what_director_rows_hold_and_judges_the_tag_alone_like_any() -> None:
    listing = seen(
        instance("i-row", request="d-2", director=False, age_s=900),
        instance("i-launching", request="d-3", age_s=900),
        instance("i-ours", request="d-1", age_s=900),
        instance("i-forged", request="d-forged", age_s=900),
        instance("i-node", request="r-1", director=False, age_s=900),
    )
    snapshot = Snapshot(
        now=NOW,
        workload=WorkloadSnapshot(NOW, {}),
        nodes={},
        instances={"aws-east": listing},
        director_instances=frozenset({"i-row"}),
        director_requests=frozenset({"d-3"}),
        ownership=Ownership(issued=frozenset({"d-1", "d-2", "d-3", "r-1"})),
    )
    found = reconcile(SETTINGS, snapshot, 300)
    # held by a row (instance id, or a launch in progress): the director lifecycle's
    assert found.orphans == {"aws-east": ["i-node", "i-ours"]}
    assert [f.instance_id for f in found.foreign["aws-east"]] == ["i-forged"]
    assert found.foreign["aws-east"][0].role == ROLE_DIRECTOR


# --- the engine gate ----------------------------------------------------------------------


def slot(name: str, template: str, state: NodeState = NodeState.POWERED_DOWN) -> NodeView:
    slurm = WorkloadNode(name=name, state="IDLE", flags=frozenset({"CLOUD", "POWERED_DOWN"}))
    return NodeView(name, "cloud", state, template, slurm)


def view_of(
    settings: Settings, *nodes: NodeView, pending: tuple[PendingJob, ...] = ()
) -> ClusterView:
    return ClusterView(
        now=NOW,
        templates=template_views(settings),
        nodes={n.name: n for n in nodes},
        pending=pending,
    )


def test_clamp_refuses_a_region_without_a_ready_director_and_launches_the_other() -> None:
    waiting = {"aws-cpu": waiting_reason(NAME, D.BOOTING)}
    view = with_waits(
        view_of(SETTINGS, slot("aws-1", "aws-cpu"), slot("lc-1", "local-cpu")), waiting
    )
    decision = ScaleDecision(
        launches=(
            Launch("aws-cpu", 1, "queue", jobs=("7",)),
            Launch("local-cpu", 1, "queue", jobs=("8",)),
        )
    )
    plan = clamp(decision, view, SETTINGS)
    assert [o.template for o in plan.launches] == ["local-cpu"]
    [refusal] = plan.refusals
    assert refusal.template == "aws-cpu" and refusal.jobs == ("7",)
    assert refusal.reason == (
        "(Code:DIRECTOR) waiting for director director-aws-east-us-east-1 (booting)"
    )
    assert waiting_summary(view) == ["waiting for director director-aws-east-us-east-1 (booting)"]


def test_without_a_wait_the_same_launch_goes_ahead() -> None:
    view = with_waits(view_of(SETTINGS, slot("aws-1", "aws-cpu")), {})
    plan = clamp(ScaleDecision(launches=(Launch("aws-cpu", 1, "queue"),)), view, SETTINGS)
    assert [o.nodes for o in plan.launches] == [("aws-1",)] and not plan.refusals


def job(job_id: str, partition: str = "cloud") -> PendingJob:
    return PendingJob(
        job_id=job_id, partition=partition, nodes=1, tasks=1, cpus_per_node=1,
        memory_per_node_mb=0, gpus_per_node=0, gpu_model=None, gpus_per_job=0, features=(),
        time_limit_min=None, submit_time=NOW, reason="Resources", estimated_start=None,
    )  # fmt: skip


def test_demand_comes_from_active_nodes_the_plan_and_jobs_that_wait_for_a_director() -> None:
    quiet = view_of(SETTINGS, slot("aws-1", "aws-cpu"), slot("lc-1", "local-cpu"))
    assert providers_in_demand(quiet, None) == frozenset()
    busy = view_of(SETTINGS, slot("aws-1", "aws-cpu", NodeState.UP))
    assert providers_in_demand(busy, None) == {"aws-east"}
    waiting = with_waits(
        view_of(SETTINGS, slot("aws-1", "aws-cpu"), pending=(job("9"),)),
        {"aws-cpu": waiting_reason(NAME, D.STOPPED)},
    )
    assert providers_in_demand(waiting, None) == {"aws-east"}
    elsewhere = with_waits(
        view_of(SETTINGS, slot("aws-1", "aws-cpu"), pending=(job("9", "batch"),)),
        {"aws-cpu": waiting_reason(NAME, D.STOPPED)},
    )
    assert providers_in_demand(elsewhere, None) == frozenset()


def test_the_gate_waits_for_a_ready_director_whose_instance_this_cycle_does_not_list(
    tmp_path: Any,
) -> None:
    from clustermgr.db.database import Database
    from clustermgr.db.models import Provider
    from clustermgr.directors.gate import read_gate
    from clustermgr.directors.states import ensure, transition

    db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    db.upgrade()
    with db.session() as session:
        session.add(
            Provider(name="aws-east", type="aws", region="us-east-1", credentials_source="x")
        )
        session.flush()
        row = ensure(session, "aws-east", "us-east-1", actor="test")
        for state in (D.LAUNCHING, D.BOOTING, D.SYNCING, D.READY):
            transition(row, state, "test", "test")
        row.instance_id = "i-1"
    with db.session() as session:
        assert read_gate(session, SETTINGS).waiting == {}  # no listing: the database says READY
        assert read_gate(session, SETTINGS, {"aws-east": seen(instance())}).waiting == {}
        gone = read_gate(session, SETTINGS, {"aws-east": {}}).waiting
        assert gone["aws-cpu"].endswith(f"waiting for director {NAME} (lost)")
        dying = seen(instance(state=InstanceState.STOPPING))
        assert "aws-cpu" in read_gate(session, SETTINGS, {"aws-east": dying}).waiting
    db.dispose()

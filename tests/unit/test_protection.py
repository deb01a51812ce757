"""Protected mode's rule: N failures in a row protect a template until the back-off has
passed since the last one; 0 disables it; the plan refuses a protected template's demand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from clustermgr.config import Settings, parse_settings
from clustermgr.policy.decision import Launch, ScaleDecision
from clustermgr.scaling.clamp import clamp
from clustermgr.scaling.protection import judge, with_this_cycle
from tests.unit.test_policies import slot, template, view

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def settings(limit: int = 3, backoff_s: float = 600) -> Settings:
    return parse_settings(
        {"daemon": {"protect_after_failures": limit, "protect_backoff_s": backoff_s}}
    )


def failures(count: int, last_ago_s: float = 10) -> list[tuple[datetime, str]]:
    return [(NOW - timedelta(seconds=last_ago_s + i), "BOOT_TIMEOUT") for i in range(count)][::-1]


def test_the_limit_protects_until_the_back_off_has_passed() -> None:
    assert judge("gpu", failures(2), settings(), NOW).protected is None
    hit = judge("gpu", failures(3), settings(), NOW)
    assert hit.failures == 3 and hit.last_kind == "BOOT_TIMEOUT"
    assert hit.protected is not None and hit.protected.startswith(
        "(Code:PROTECTED) 3 launch/boot failures in a row (last BOOT_TIMEOUT); retry at"
    )
    assert "clustermgr templates reset gpu" in hit.protected
    later = judge("gpu", failures(3, last_ago_s=700), settings(), NOW)
    assert later.protected is None  # back-off over: one more try
    off = judge("gpu", failures(50), settings(limit=0), NOW)
    assert off.protected is None


def test_one_invalid_launch_protects_at_once() -> None:
    """An instance type the region does not offer fails the same way every time: it is not
    retried until 3 failures (issue 26: 14 retries of a g3.8xlarge)."""
    one = [(NOW - timedelta(seconds=10), "INVALID")]
    hit = judge("gpu", one, settings(), NOW)
    assert hit.protected is not None and "refused its launch as INVALID" in hit.protected
    assert "clustermgr templates reset gpu" in hit.protected
    assert judge("gpu", one, settings(limit=0), NOW).protected is None  # protection off


def test_the_plan_refuses_a_protected_templates_demand() -> None:
    reason = "(Code:PROTECTED) 3 launch/boot failures in a row (last QUOTA)"
    v = view([slot("g1"), slot("g2")], [], templates={"gpu": template(protected=reason)})
    decision = ScaleDecision(launches=(Launch("gpu", 2, "queue_depth", jobs=("7",)),))
    plan = clamp(decision, v, parse_settings({}))
    assert plan.launches == []
    assert [(r.template, r.reason, r.jobs) for r in plan.refusals] == [("gpu", reason, ("7",))]


def test_a_busy_cloud_backs_off_doubling_per_launch_up_to_the_max() -> None:
    from clustermgr.scaling.protection import judge_backoff

    conf = parse_settings({"daemon": {"launch_backoff_s": 30, "launch_backoff_max_s": 100}})

    def busy(*seconds_ago: float) -> list[tuple[datetime, str]]:
        return [(NOW - timedelta(seconds=s), "THROTTLED") for s in seconds_ago]

    assert judge_backoff([], conf, NOW) is None
    one = judge_backoff(busy(10), conf, NOW)  # waits 30 s after the first
    assert one is not None and one.startswith("(Code:BACKOFF) 1 launch(es) in a row failed")
    assert judge_backoff(busy(31), conf, NOW) is None
    assert judge_backoff(busy(200, 50), conf, NOW) is not None  # 60 s after the second
    assert judge_backoff(busy(300, 200, 70), conf, NOW) is not None  # 100 s (max), not 120
    assert judge_backoff(busy(300, 200, 101), conf, NOW) is None
    batch = [(NOW - timedelta(seconds=40, microseconds=m), "TRANSIENT") for m in (1, 2, 3)]
    assert judge_backoff(batch, conf, NOW) is None  # one launch of three nodes: 30 s
    off = parse_settings({"daemon": {"launch_backoff_s": 0}})
    assert judge_backoff(busy(1), off, NOW) is None


def test_failures_judged_this_cycle_protect_before_the_plan() -> None:
    """The cycle that judges a batch's boot timeouts counts them before it plans (issue 21):
    two on the database's one reach the limit of three now, not a cycle later; a node that
    registered this cycle starts the count again."""
    config = parse_settings(
        {
            "daemon": {"protect_after_failures": 3, "protect_backoff_s": 600},
            "providers": [{"name": "aws1", "type": "aws", "region": "us-east-1"}],
            "templates": [
                {
                    "name": "gpu",
                    "provider": "aws1",
                    "partition": "cloud",
                    "nodes": "g[1-4]",
                    "instance_types": ["p4d.24xlarge"],
                    "image": "ami-1",
                    "cpus": 8,
                    "memory_mb": 1000,
                }
            ],
        }
    )
    health = {"gpu": judge("gpu", failures(1), config, NOW)}
    assert with_this_cycle(health, {}, set(), config, NOW) == {}
    now = with_this_cycle(health, {"gpu": ["BOOT_TIMEOUT"] * 2}, set(), config, NOW)
    assert now["gpu"].startswith("(Code:PROTECTED) 3 launch/boot failures in a row")
    assert with_this_cycle(health, {"gpu": ["CAPACITY"] * 2}, set(), config, NOW) == {}
    assert with_this_cycle(health, {"gpu": ["BOOT_TIMEOUT"] * 2}, {"gpu"}, config, NOW) == {}

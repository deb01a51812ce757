"""The crash campaign, CI-sized (bench/chaos_campaign.py runs the full one: 200 nodes, 20
trials per cloud; docs/reliability.md has its figures).

Per cloud one trial of tests/labs/chaoslab.py: a burst through cm-scale (the daemon) killed
with SIGKILL at a named point, restarted for one reconcile cycle and checked, then a
scale-down killed at another point, restarted and checked (tests/labs/chaoscheck.py): the
cloud's instances are the ones the database holds, no node name has two, none is an orphan,
no node lost its instance or a consistent history. The seeds are chosen so that the four
trials cover eight different points; any seed runs any point (the bench turns through all).
The clouds burst 20 nodes that never register (no slurmd behind 20 fake instances); local
bursts 3 real slurmd in network namespaces whose jobs run and whose nodes the idle timeout
stops. The all-or-nothing trials (WHOLE) burst jobs of 4 nodes each launched whole, killed
at a step of such a launch, and check that no job is left with part of its set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_bench_quick
from tests.labs.chaoslab import chaos_lab

# cloud -> (burst size, seed): the seed picks the burst and scale-down points
TRIALS = {
    "aws": (20, 12),  # binding: CreateTags of one instance answered, lost; stopping
    "azure": (20, 7),  # failing: FAILED committed for nodes short of capacity; terminate-done
    "openstack": (20, 2),  # launch-sent: one server create never reached Nova; terminate-sent
    "local": (3, 2),  # namespace made, record not yet "running"; terminate stalled
}
EXPECTED = {
    "aws": ("binding", "stopping"),
    "azure": ("failing", "terminate-done"),
    "openstack": ("launch-sent", "terminate-sent"),
    "local": ("namespace", "terminate-sent"),
}


@pytest.mark.parametrize("cloud", sorted(TRIALS))
def test_a_killed_burst_and_scale_down_converge_with_nothing_lost(
    cloud: str, chaos_dir: Path
) -> None:
    nodes, seed = TRIALS[cloud]
    with chaos_lab(cloud, chaos_dir / cloud, nodes) as lab:
        result = lab.trial(seed)
    print(result.line())  # in the report on failure
    hit = tuple(what.split(" ")[0] for what in result.points.values())
    assert hit == EXPECTED[cloud], result.points
    assert result.missed == [], result.line()  # the daemon really died at those points
    assert result.errors == [], result.line()  # each restarted cycle ran through
    assert [f"{phase}: {f.line()}" for phase, f in result.findings] == []


# all or nothing (issue 33): jobs of 4 nodes on an all-or-nothing, per-launch-placement
# template; cloud -> (seed, the burst point it hits); the seed also picks the capacity the
# restarted cycle finds (free, or scarce: room for less than a job)
WHOLE = {
    "aws": (11, "binding", True),  # the fleet started, one of its 20 CreateTags answered
    "azure": (9, "releasing", False),  # a batch one VM short: its release held
    "openstack": (5, "launch-done", True),  # a multi-create carried out, its answer lost
}


@pytest.mark.parametrize("cloud", sorted(WHOLE))
def test_an_all_or_nothing_launch_killed_ends_with_the_whole_set_or_none(
    cloud: str, chaos_dir: Path
) -> None:
    """After the restarted cycle no job has part of its set (`partial`), no node two
    instances, nothing is orphaned or lost."""
    seed, point, scarce = WHOLE[cloud]
    with chaos_lab(cloud, chaos_dir / f"{cloud}-whole", 20, job_nodes=4) as lab:
        result = lab.trial(seed)
    print(result.line())
    burst = result.points["burst"]
    assert (burst.split(" ")[0], "scarce at restart" in burst) == (point, scarce), burst
    assert result.missed == [], result.line()
    assert result.errors == [], result.line()
    assert [f"{phase}: {f.line()}" for phase, f in result.findings] == []


def test_the_campaign_runner_quick_mode_runs(chaos_dir: Path) -> None:
    """bench/chaos_campaign.py --quick (an aws lab of 6 nodes, one trial) runs here, in the
    cloud-networks group, not with the other benches (tests/integration/test_bench_smoke.py):
    its lab is on the AWS fake's network, which one lab at a time may use."""
    done = run_bench_quick("chaos_campaign.py", chaos_dir, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "| aws | 6 | 1 |" in done.stdout, out  # the table's row: 6 nodes, one trial

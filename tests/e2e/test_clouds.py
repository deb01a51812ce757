"""One burst through cm-scale, the daemon, on each cloud SDK against its fake, with a real
slurmctld and a real slurmd booted behind every instance (tests/labs/cloudlab.py): the
daemon holds the burst nodes, a capacity error on the first instance type falls back to the
next, the node registers, the job runs, the idle node is terminated; then a quota error
powers the node down with `(Code:QUOTA)` and the job waits (never requeued: it was never
placed on a node whose launch could still fail). A spool file no hook wrote is
moved aside with a warning. No secret of the cloud shows up in the daemon's log, the
database or any `--json` output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind
from tests.labs.cloudlab import CLOUDS, CloudLab, cloud_lab


@pytest.fixture(params=sorted(CLOUDS))
def lab(request: pytest.FixtureRequest, lab_dir: Path) -> Iterator[CloudLab]:
    with cloud_lab(lab_dir, request.param) as made:
        yield made


def slurm_nodes(lab: CloudLab) -> dict[str, tuple[str, str]]:
    assert lab.slurm is not None
    out = lab.slurm.run("sinfo", "-N", "-h", "-o", "%N|%T|%E").stdout
    rows = [line.split("|", 2) for line in out.splitlines() if line.strip()]
    return {name: (state, reason) for name, state, reason in rows}


def all_held(lab: CloudLab, *only: str) -> bool:
    """Powered down and drained by clustermgr: in policy mode Slurm cannot power them up."""
    nodes = slurm_nodes(lab)
    return all(
        state == "drained~" for name, (state, _) in nodes.items() if name in only or not only
    )


# A known lab flake, about one full run in four under xdist: this lab's slurmctld stops
# answering mid-test ("Unable to contact slurm controller"; its log once showed it starting
# over). Not the product's doing as far as two sessions could tell; the lab's client errors
# now say what became of slurmctld and munged (SlurmLab.controller_state) so the next one
# is explained. Rerun once, on that message only: any other failure fails at once.
@pytest.mark.flaky(reruns=1, only_rerun=["Unable to contact slurm controller"])
def test_burst_scale_down_and_quota_through_the_daemon(lab: CloudLab) -> None:
    first, second = lab.kind.instance_types[:2]
    lab.kind.starve_first_type(lab.harness, first)
    with lab.daemon() as daemon:
        lab.wait("the daemon to hold the burst nodes", lambda: all_held(lab), 30)
        job = lab.submit("--wrap", "hostname")
        lab.wait("the job to complete", lambda: lab.job(job, "JobState") == "COMPLETED", 150)
        [instance] = lab.instances()
        assert instance["instance_type"] == second  # no capacity for the first type
        node = str(instance["node"])

        def states() -> list[str]:
            history = json.loads(lab.clustermgr("nodes", "history", node, "--json").stdout)
            return [h["new_state"] for h in history]

        # a short job can end before the next cycle sees the node registered
        lab.wait("the node recorded UP", lambda: "UP" in states(), 30)
        seen = states()
        launched = len(seen) - 1 - seen[::-1].index("LAUNCHING")
        assert seen[launched : launched + 3] == ["LAUNCHING", "BOOTING", "UP"], seen

        bad = lab.state_dir / "spool" / "1.000000-1-resume.json"
        bad.write_text("{not json")  # no hook writes this: the daemon must shrug it off
        lab.wait("the idle node's instance to be terminated", lambda: lab.instances() == [], 90)
        assert not bad.exists() and bad.with_name(bad.name + ".rejected").exists()

        lab.harness.fail_next_launches(ErrorKind.QUOTA, attempts=100)
        waiting = lab.submit("--wrap", "hostname")
        held_for_quota = "clustermgr: held until a policy launches it; last: (Code:QUOTA)"
        lab.wait(  # powered down with the reason, then held with the reason still shown
            "a node held with (Code:QUOTA) in its reason",
            lambda: any(r.startswith(held_for_quota) for _, r in slurm_nodes(lab).values()),
            60,
        )
        # held while its launches failed: never placed there, so never requeued (no
        # BeginTime hold from Slurm), the job just waits
        assert (lab.job(waiting, "JobState"), lab.job(waiting, "Restarts")) == ("PENDING", "0")
        assert lab.job(waiting, "Reason") != "BeginTime"
        assert lab.instances() == []
        assert daemon.poll() is None  # still serving
    output = (lab.workdir / "cm-scale.log").read_text()
    assert "Traceback" not in output, output[-3000:]
    assert f"WARNING clustermgr.scaling.engine: spool: {bad.name}: not JSON" in output
    seen = {
        "cm-scale's log": output,
        "events --json": lab.clustermgr("events", "--since", "1h", "--json").stdout,
        "nodes list --json": lab.clustermgr("nodes", "list", "--json").stdout,
        "status --json": lab.clustermgr("status", "--json", check=False).stdout,
        "the database": (lab.workdir / "cm.db").read_bytes().decode("utf-8", "replace"),
    }
    for secret in lab.harness.secrets():
        assert [where for where, text in seen.items() if secret in text] == [], secret

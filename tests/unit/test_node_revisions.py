"""A burst node's report of its image revision and kernel: its form where it enters (Slurm's
Extra field), its check against the template's image, and the verdict on a stale revision."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from clustermgr.core.node_report import NodeReport, parse_extra
from clustermgr.imaging.definitions import ImageDefinition, LoadedImage
from clustermgr.imaging.launch_images import RegionImage
from clustermgr.imaging.node_revisions import checked_report, stale_reason
from clustermgr.nodes.states import NodeState
from clustermgr.scaling.observe import Snapshot
from clustermgr.scaling.reconcile import reconcile
from clustermgr.scaling.verdicts import SlurmSeen, Verdict, slurm_seen
from clustermgr.workload.base import WorkloadNode
from clustermgr.workload.gpu_health import own_report
from clustermgr.workload.slurm import parse_sinfo_nodes
from tests.unit.test_verdicts import SETTINGS, instance, record, snapshot

pytestmark = pytest.mark.unit

R1, R2 = "r1-0123456789ab", "r2-ba9876543210"
KERNEL = "6.1.0-13-amd64"
STALE = "(Code:IMAGE) runs revision r1-0123456789ab of node, director local-here serves "


def extra(image: object = "node", revision: object = R1, kernel: object = KERNEL) -> str:
    report = {"image": image, "revision": revision, "kernel": kernel}
    return json.dumps({"clustermgr": report})


def region_image(served: str = R2, director: str = "local-here") -> RegionImage:
    definition = ImageDefinition.model_validate(
        {"name": "node", "tree": "/srv/node", "user_data": "node.tmpl"}
    )
    image = LoadedImage(definition, Path("/etc/clustermgr/images/node.toml"), "")
    return RegionImage(
        image, "ami-1", "10.0.0.2", served, director=director, known=frozenset({R1, R2})
    )


# --- the form, where it enters -------------------------------------------------------------


def test_a_report_round_trips_and_keeps_another_tools_keys() -> None:
    report = NodeReport("node", R1, KERNEL)
    text = report.as_extra('{"rack":"b7"}')
    assert json.loads(text)["rack"] == "b7"
    assert parse_extra(text) == (report, None)
    assert parse_extra(report.as_extra("free text")) == (report, None)
    assert parse_extra(NodeReport(kernel=KERNEL).as_extra()) == (NodeReport("", "", KERNEL), None)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (extra(kernel="6.1; rm -rf /"), "kernel '6.1; rm -rf /' does not look like one"),
        (extra(kernel=""), "kernel '' does not look like one"),
        (extra(revision="../../etc"), "revision '../../etc' does not look like one"),
        (extra(image="a b"), "image 'a b' does not look like one"),
        (extra(revision=3), "revision is not a string"),
        ('{"clustermgr": ["node"]}', "its 'clustermgr' entry is not an object"),
    ],
)
def test_junk_in_the_report_is_refused_with_why(text: str, why: str) -> None:
    assert parse_extra(text) == (None, why)


@pytest.mark.parametrize("text", ["", "rack b7", '{"rack": "b7"}', "[1]", "{" + "x" * 5000])
def test_an_extra_field_without_a_report_reports_nothing(text: str) -> None:
    assert parse_extra(text) == (None, None)


def test_sinfo_reads_the_report_and_skips_junk_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = {"state": "IDLE", "state_flags": ["CLOUD"], "cpus": 2}
    data = {
        "nodes": [
            {**raw, "name": "c1", "extra": extra()},
            {**raw, "name": "c2", "extra": extra(kernel="$(reboot)")},
            {**raw, "name": "c3", "extra": ""},
        ]
    }
    with caplog.at_level(logging.WARNING):
        nodes = parse_sinfo_nodes(data)
    assert nodes["c1"].report == NodeReport("node", R1, KERNEL)
    assert nodes["c2"].report is None and nodes["c3"].report is None
    assert "node c2: its image report (Slurm's Extra field) skipped: kernel" in caplog.text
    assert "c1" not in caplog.text and "c3" not in caplog.text


def test_the_node_reports_its_node_env_and_running_kernel(tmp_path: Path) -> None:
    env = tmp_path / "node.env"
    env.write_text(f"CLUSTERMGR_IMAGE=node\nCLUSTERMGR_IMAGE_REVISION={R1}\nCLUSTERMGR_X=1\n")
    assert own_report(env) == NodeReport("node", R1, os.uname().release)
    assert own_report(tmp_path / "none") == NodeReport("", "", os.uname().release)


# --- the check against the template's image, and the verdict ---------------------------------


def test_a_revision_the_image_never_had_or_another_image_keeps_only_the_kernel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    found = region_image()
    with caplog.at_level(logging.WARNING):
        unknown = checked_report("c1", found, NodeReport("node", "r9-ffffffffffff", KERNEL))
        other = checked_report("c2", found, NodeReport("gpu-node", R1, KERNEL))
        raw = checked_report("c3", None, NodeReport("node", R1, KERNEL))
    assert unknown == other == raw == NodeReport(kernel=KERNEL)
    assert "revision 'r9-ffffffffffff' is not one of image node's" in caplog.text
    assert "it reports image 'gpu-node', its template's is 'node'" in caplog.text
    assert "its template names no image definition" in caplog.text
    assert checked_report("c4", found, NodeReport("node", R1, KERNEL)) == NodeReport(
        "node", R1, KERNEL
    )


def test_only_a_known_older_revision_under_a_serving_director_is_stale() -> None:
    old = NodeReport("node", R1, KERNEL)
    assert stale_reason(region_image(), old) == STALE + R2
    assert stale_reason(region_image(), NodeReport("node", R2, KERNEL)) is None
    assert stale_reason(region_image(), NodeReport("node", "", KERNEL)) is None  # booted first
    assert stale_reason(region_image(served=""), old) is None  # nothing verified yet
    assert stale_reason(region_image(director=""), old) is None  # no director serving
    assert stale_reason(None, old) is None  # the template names no definition
    assert stale_reason(region_image(), None) is None


def node(name: str, state: str = "IDLE", flags: tuple[str, ...] = (), **kw: object) -> WorkloadNode:
    return WorkloadNode(
        name,
        state,
        frozenset({"CLOUD", *flags}),
        address="10.0.0.9",
        **kw,  # type: ignore[arg-type]
    )


def with_images(base: Snapshot, found: RegionImage | None) -> Snapshot:
    return Snapshot(**{**base.__dict__, "images": {"gpu": found} if found else {}})


def test_a_node_on_a_stale_revision_is_retired_and_its_report_recorded() -> None:
    up = record("g1", NodeState.UP, instance_id="i-1", private_address="10.0.0.9")
    seen = node("g1", "ALLOCATED", report=NodeReport("node", R1, KERNEL))
    base = snapshot([up], [instance("i-1", "g1", "r1")], [seen])
    found = reconcile(SETTINGS, with_images(base, region_image()), 0)
    judged = found.verdicts["g1"]
    assert (judged.verdict, judged.reason) == (Verdict.RETIRE, STALE + R2)
    assert (found.facts["g1"].image_revision, found.facts["g1"].kernel) == (R1, KERNEL)
    current = reconcile(SETTINGS, with_images(base, region_image(served=R1)), 0)
    assert current.verdicts["g1"].verdict is Verdict.KEEP
    raw = reconcile(SETTINGS, with_images(base, None), 0)  # no definition: kernel only
    assert raw.verdicts["g1"].verdict is Verdict.KEEP
    assert (raw.facts["g1"].image_revision, raw.facts["g1"].kernel) == (None, KERNEL)


def test_slurm_keeps_a_powered_down_nodes_report_and_it_is_not_taken() -> None:
    down = record("g1", NodeState.POWERED_DOWN)  # its instance released: no report kept
    seen = node("g1", flags=("POWERED_DOWN",), report=NodeReport("node", R1, KERNEL))
    base = snapshot([down], [], [seen])
    found = reconcile(SETTINGS, with_images(base, region_image()), 0)
    assert "g1" not in found.verdicts
    assert (found.facts["g1"].image_revision, found.facts["g1"].kernel) == (None, None)


def test_an_image_drain_is_sick_until_powered_down_and_then_replaced_when_idle() -> None:
    reason = STALE + R2
    assert slurm_seen(node("g1", "ALLOCATED", ("DRAIN",), reason=reason), None) is (
        SlurmSeen.SICK_BUSY
    )
    assert slurm_seen(node("g1", "IDLE", ("DRAIN",), reason=reason), None) is SlurmSeen.SICK_IDLE
    waiting = "(Code:IMAGE) waiting for image node in here: it is being copied"
    powered = node("g1", "IDLE", ("DRAIN", "POWERED_DOWN"), reason=waiting)
    assert slurm_seen(powered, None) is SlurmSeen.POWERED_DOWN  # an image wait, not a drain
    draining = record("g1", NodeState.DRAINING, instance_id="i-1", private_address="10.0.0.9")
    idle = node("g1", "IDLE", ("DRAIN",), reason=reason)
    done = reconcile(SETTINGS, snapshot([draining], [instance("i-1", "g1", "r1")], [idle]), 0)
    assert (done.verdicts["g1"].verdict, done.verdicts["g1"].reason) == (Verdict.STOP, reason)
    busy = node("g1", "MIXED", ("DRAIN",), reason=reason)
    kept = reconcile(SETTINGS, snapshot([draining], [instance("i-1", "g1", "r1")], [busy]), 0)
    assert kept.verdicts["g1"].verdict is Verdict.KEEP  # its jobs finish first

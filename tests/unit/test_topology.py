"""topology.conf lines from the templates (workload/topology.py), without a Slurm."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.core.errors import ConfigError
from clustermgr.workload.topology import parse_site, render_topology
from tests.unit.test_config import MINIMAL, write

pytestmark = pytest.mark.unit

PPG = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/proximityPlacementGroups/ib 1"


def test_a_resource_id_group_is_its_last_segment_as_a_slurm_word(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL + f'placement_group = "{PPG}"\n'))
    lines = render_topology(settings, ["on2", "login1", "on1"])
    switches = [line for line in lines if line.startswith("SwitchName=")]
    assert switches == [
        "SwitchName=cm-pg-aws1-ib-1 Nodes=gpu-[001-004]",
        "SwitchName=cm-onprem Nodes=login1,on[1-2]",
        "SwitchName=cm-top Switches=cm-pg-aws1-ib-1,cm-onprem",
    ]


def test_no_onprem_nodes_means_no_onprem_switch(tmp_path: Path) -> None:
    lines = render_topology(load_settings(write(tmp_path, MINIMAL)), [])
    assert [line for line in lines if line.startswith("SwitchName=")] == [
        "SwitchName=cm-t-t1 Nodes=gpu-[001-004]",
        "SwitchName=cm-top Switches=cm-t-t1",
    ]


def test_a_site_switch_named_like_ours_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^site\.conf line 1: switch 'cm-top'"):
        parse_site("SwitchName=cm-top Nodes=on1\n", "site.conf")

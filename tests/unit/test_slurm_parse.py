from __future__ import annotations

import pytest

from clustermgr.core.errors import WorkloadError
from clustermgr.workload.base import parse_gpu_gres
from clustermgr.workload.slurm import parse_sinfo_nodes


def test_gres_parsing() -> None:
    assert parse_gpu_gres("gpu:a100:8(S:0-1)") == ("a100", 8)
    assert parse_gpu_gres("gpu:2") == (None, 2)
    assert parse_gpu_gres("(null)") == (None, 0)
    assert parse_gpu_gres("gpu:a100:2,gpu:v100:1") == ("a100", 3)


def test_sinfo_2205_layout() -> None:
    data = {
        "nodes": [
            {
                "name": "cloud1",
                "state": "idle",
                "state_flags": ["CLOUD", "POWERED_DOWN"],
                "cpus": 2,
                "real_memory": 1000,
                "gres": "gpu:fake:2",
                "partitions": ["cloud"],
                "features": "cloud,local",
                "address": "cloud1",
                "hostname": "cloud1",
                "reason": "",
            },
            {"name": "on1", "state": "down", "state_flags": ["NOT_RESPONDING"], "cpus": 4},
        ]
    }
    nodes = parse_sinfo_nodes(data)
    cloud = nodes["cloud1"]
    assert cloud.is_cloud and cloud.powered_down and cloud.gpus == 2 and cloud.gpu_model == "fake"
    assert cloud.features == ("cloud", "local") and not cloud.usable
    assert nodes["on1"].state == "DOWN" and not nodes["on1"].responding


def test_sinfo_later_layout_with_state_lists() -> None:
    data = {"nodes": [{"name": "n1", "state": ["IDLE", "DRAIN"], "cpus": {"number": 8}}]}
    node = parse_sinfo_nodes(data)["n1"]
    assert node.state == "IDLE" and node.drained and node.cpus == 8


def test_garbage_is_a_workload_error() -> None:
    with pytest.raises(WorkloadError, match="no 'nodes' list"):
        parse_sinfo_nodes({"jobs": []})

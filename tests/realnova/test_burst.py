"""The e2e burst of tests/e2e/test_clouds.py through cm-scale, with the OpenStack provider
against the real control plane instead of the fake: g1.quad fits no host (a real NoValidHost)
so the node falls back to g1.small, a real slurmd boots at the address neutron gave the
port, the job runs, the idle node's server is deleted; then the project's instances quota is
0 and the node is held with (Code:QUOTA)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_clouds import (  # noqa: F401 - collected here too
    test_burst_scale_down_and_quota_through_the_daemon,
)
from tests.labs.cloudlab import CloudKind, CloudLab, cloud_lab
from tests.realnova import harness
from tests.services.openstack import controlplane
from tests.services.openstack.controlplane import ControlPlane


def real_nova_kind(plane: ControlPlane) -> CloudKind:
    def made(workdir: Path, **_fake_options: Any) -> contextlib.AbstractContextManager[Any]:
        return harness.contract_harness(plane, workdir)

    return CloudKind(
        "openstack",
        made,
        controlplane.SUBNET_CIDR,
        ("g1.quad", "g1.small"),  # the first fits no host: Nova's scheduler says so itself
        lambda h: {
            "image": controlplane.IMAGE,
            "network": controlplane.NETWORK,
            "security_groups": ["default"],
            "key_name": harness.KEY_NAME,
        },
        {"polling_interval_s": 0.5},
        starve_first_type=lambda _h, _type: None,
    )


@pytest.fixture
def lab(plane: ControlPlane, lab_dir: Path) -> Iterator[CloudLab]:
    with cloud_lab(lab_dir, real_nova_kind(plane)) as made:
        yield made

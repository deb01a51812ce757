"""An installed outside provider package is a provider type like the built-ins: found by its
`clustermgr.providers` entry point, its keys checked by its own options model (one line
naming the key), the keys of other types refused, and reading the kinds imports no cloud
SDK. (tests/e2e/test_outside_provider.py bursts a job through it.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.labs.outside import install_outside_provider, outside_toml

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield install_outside_provider(tmp_path_factory.mktemp("outside"))


def config_check(site: Path, tmp_path: Path, provider: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "clustermgr.toml"
    config.write_text(
        f'[cluster]\nname = "c"\n[[providers]]\nname = "o"\nregion = "here"\n{provider}\n'
        '[[templates]]\nname = "t"\nprovider = "o"\npartition = "cloud"\nnodes = "n[1-2]"\n'
        'instance_types = ["local.cpu"]\nimage = "local"\ncpus = 2\nmemory_mb = 900\n'
    )
    env = {**os.environ, "PYTHONPATH": str(site), "CLUSTERMGR_CONFIG": str(config)}
    argv = [str(BIN / "clustermgr"), "providers", "list", "--json"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


def test_its_type_and_own_keys_are_accepted(site: Path, tmp_path: Path) -> None:
    done = config_check(site, tmp_path, outside_toml("10.213.9.0/24", tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    assert [(p["name"], p["type"]) for p in json.loads(done.stdout)] == [("o", "outside")]


@pytest.mark.parametrize(
    ("provider", "line"),
    [
        (
            outside_toml("10.213.9.0/33", Path("/s")),
            "providers[0:o].lab_subnet: Input is not a valid IPv4 network (got '10.213.9.0/33')",
        ),
        (
            outside_toml("10.213.9.0/24", Path("relative")),
            "providers[0:o].lab_state_dir: must be an absolute path (got 'relative')",
        ),
        (
            'type = "outside"\nlab_subnet = "10.213.9.0/24"',
            "providers[0:o].lab_state_dir: Field required",
        ),
        (
            outside_toml("10.213.9.0/24", Path("/s")) + '\nsubnet = "10.0.0.0/24"',
            "providers[0:o]: key 'subnet' is only for local providers",
        ),
        (
            'type = "local"\nlab_subnet = "10.213.9.0/24"',
            "providers[0:o]: key 'lab_subnet' is only for outside providers",
        ),
    ],
)
def test_its_keys_are_checked_by_its_own_model(
    site: Path, tmp_path: Path, provider: str, line: str
) -> None:
    done = config_check(site, tmp_path, provider)
    assert done.returncode == 2
    config = tmp_path / "clustermgr.toml"
    assert done.stderr.strip().splitlines() == [f"clustermgr: error: {config}: {line}"]


def test_without_the_package_the_type_is_unknown(tmp_path: Path) -> None:
    done = config_check(tmp_path, tmp_path, outside_toml("10.213.9.0/24", Path("/s")))
    assert done.returncode == 2
    assert "unknown provider type 'outside' (known: aws, azure, ipmi, local, " in done.stderr


def test_reading_the_kinds_imports_no_cloud_sdk(site: Path) -> None:
    probe = (
        "import sys; from clustermgr.core.kinds import kinds; print(sorted(kinds())); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('boto3', 'botocore', 'azure', 'openstack', 'sushy')))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.stdout.splitlines() == [
        "['aws', 'azure', 'ipmi', 'local', 'openstack', 'outside', 'redfish']",
        "[]",
    ]

"""`clustermgr providers check|instances` and `catalog` as an admin runs them, against the
AWS SDK over the moto fake (a real child process; the fake in this process)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fakes.aws_fake import FakeAws
from tests.fakes.aws_harness import ACCESS_KEY, BAD_ACCESS_KEY, BAD_SECRET_KEY, IMAGE, SECRET_KEY

CONFIG = """
[cluster]
name = "clitest"
[[providers]]
name = "aws1"
type = "aws"
region = "{region}"
endpoint_url = "{url}"
retry_mode = "standard"
[[templates]]
name = "a100"
provider = "aws1"
partition = "gpu"
nodes = "a100-[1-2]"
instance_types = ["p4d.24xlarge"]
image = "{image}"
cpus = 96
memory_mb = 1000
gpu_model = "a100"
gpus = 8
prices = {{ "p4d.24xlarge" = {{ on_demand = 32.77, spot = 12.5 }} }}
"""


@pytest.fixture
def fake() -> Iterator[FakeAws]:
    with FakeAws() as running:
        yield running


@pytest.fixture
def setup(fake: FakeAws, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(region=fake.region, url=fake.url, image=IMAGE))
    env = {
        "CLUSTERMGR_CONFIG": str(config),
        "CLUSTERMGR_DB": f"sqlite:///{tmp_path / 'cm.db'}",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    assert run_cli("db", "upgrade", env=env).returncode == 0
    return config, env


def test_check_passes_with_one_ok_line_per_check(setup: tuple[Path, dict[str, str]]) -> None:
    _, env = setup
    done = run_cli("providers", "check", "aws1", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("OK   aws1: ") for line in lines)
    assert "credentials accepted (environment)" in lines[0]
    assert lines[3] == "OK   aws1: template a100: instance types offered (p4d.24xlarge)"


def test_a_type_the_region_does_not_offer_is_found_before_any_launch(
    setup: tuple[Path, dict[str, str]],
) -> None:
    """g3.8xlarge where the region lacks it: `providers check` says so live, `config check`
    from the cached catalog; neither launches anything (issue 26 item 3)."""
    config, env = setup
    config.write_text(config.read_text().replace('"p4d.24xlarge"]', '"p4d.24xlarge", "g9.nope"]'))
    done = run_cli("providers", "check", "aws1", env=env)
    assert done.returncode == 1, done.stdout
    assert done.stdout.strip().splitlines()[-1] == (
        "FAIL aws1: template a100: instance type g9.nope is not offered by provider aws1 "
        "(region us-east-1); `clustermgr catalog --provider aws1` lists what is"
    )
    assert run_cli("catalog", "--provider", "aws1", env=env).returncode == 0  # cached now
    checked = run_cli("config", "check", "--no-slurm", env=env)
    assert checked.returncode == 2
    assert "template a100: instance type g9.nope is not offered by provider aws1" in (
        checked.stdout
    )


def test_rejected_key_is_one_auth_line_naming_the_source(
    setup: tuple[Path, dict[str, str]], fake: FakeAws
) -> None:
    _, env = setup
    fake.reject_access_key(BAD_ACCESS_KEY)
    bad = {**env, "AWS_ACCESS_KEY_ID": BAD_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": BAD_SECRET_KEY}
    done = run_cli("providers", "check", "aws1", env=bad)
    assert done.returncode == 1
    [line] = done.stdout.strip().splitlines()
    assert line.startswith("FAIL aws1: credentials: ") and "AUTH" in line
    assert "credentials rejected (environment)" in line
    assert BAD_SECRET_KEY not in done.stdout + done.stderr


def test_catalog_lists_eight_gpu_types_with_prices(setup: tuple[Path, dict[str, str]]) -> None:
    _, env = setup
    done = run_cli("catalog", "--gpus", "8", "--json", env=env)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows and all(r["gpus"] >= 8 for r in rows)
    p4d = next(r for r in rows if r["name"] == "p4d.24xlarge")
    assert (p4d["gpu_model"], p4d["price_on_demand"]) == ("a100", 32.77)
    cached = run_cli("catalog", "--provider", "aws1", "--json", env=env)
    assert len(json.loads(cached.stdout)) > len(rows)  # served from the database cache


def test_instances_lists_only_ours(setup: tuple[Path, dict[str, str]], fake: FakeAws) -> None:
    _, env = setup
    done = run_cli("providers", "instances", "aws1", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_config_check_refuses_efa_on_a_type_the_catalog_says_lacks_it(
    setup: tuple[Path, dict[str, str]],
) -> None:
    """g4dn.xlarge has no EFA (DescribeInstanceTypes NetworkInfo.EfaSupported false): once the
    catalog is cached, `config check` says so for an efa = true template, before a launch."""
    config, env = setup
    config.write_text(
        config.read_text().replace(
            'instance_types = ["p4d.24xlarge"]',
            'instance_types = ["p4d.24xlarge", "g4dn.xlarge"]\n'
            'efa = true\nplacement = "per-launch"',
        )
    )
    assert run_cli("config", "check", "--no-slurm", env=env).returncode == 0  # no catalog yet
    assert run_cli("catalog", "--provider", "aws1", env=env).returncode == 0  # cached now
    checked = run_cli("config", "check", "--no-slurm", env=env)
    assert checked.returncode == 2, checked.stdout
    assert checked.stdout.strip().splitlines()[-1] == (
        "template a100: efa = true, but instance type g4dn.xlarge has no EFA (provider aws1's "
        "catalog: DescribeInstanceTypes NetworkInfo.EfaSupported); choose a type with it or "
        "remove efa"
    )

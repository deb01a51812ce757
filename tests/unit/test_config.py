from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.config import load_settings, parse_settings
from clustermgr.core.errors import ConfigError
from clustermgr.core.pricing import BillingRule
from tests.conftest import EXAMPLE_CONFIG

MINIMAL = """
[cluster]
name = "c1"

[[providers]]
name = "aws1"
type = "aws"
region = "us-east-1"

[[templates]]
name = "t1"
provider = "aws1"
partition = "cloud"
nodes = "gpu-[001-004]"
instance_types = ["p4d.24xlarge"]
image = "ami-1"
cpus = 96
memory_mb = 1000
gpu_model = "a100"
gpus = 8
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "clustermgr.toml"
    path.write_text(text)
    return path


def test_example_config_is_valid_and_complete() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    assert {p.type for p in settings.providers} == {"aws", "azure", "openstack", "local"}
    aws = settings.template("aws-a100")
    assert aws.node_names[0] == "aws-a100-001" and aws.node_limit == 16
    assert settings.provider("aws-east").billing == BillingRule(1, 60)
    assert settings.provider("azure-west").billing == BillingRule(60, 60)


def test_minimal_config_gets_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, MINIMAL))
    assert settings.providers[0].credentials.source == "chain"
    assert settings.templates[0].market == "on-demand"
    assert settings.daemon.interval_s == 30


def test_malformed_toml_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '[cluster]\nname = "x"\nhead_address = \n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value).startswith(f"{path}:3:16: invalid TOML")
    assert caught.value.exit_code == 2


def test_wrong_type_names_dotted_path_and_expectation(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("cpus = 96", 'cpus = "many"'))
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert f"{path}: templates[0:t1].cpus: Input should be a valid integer" in message
    assert "'many'" in message


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("[cluster]", "[cluster]\nnmae = 'x'"))
    with pytest.raises(ConfigError, match=r"cluster\.nmae: unknown key"):
        load_settings(path)


def test_a_secret_in_the_config_is_refused(tmp_path: Path) -> None:
    text = MINIMAL.replace('region = "us-east-1"', 'region = "us-east-1"\nsecret_key = "abc"')
    with pytest.raises(ConfigError, match=r"providers\[0:aws1\]\.secret_key: unknown key"):
        load_settings(write(tmp_path, text))


def test_template_naming_unknown_provider(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace('provider = "aws1"', 'provider = "nope"'))
    with pytest.raises(ConfigError, match="provider 'nope' is not defined"):
        load_settings(path)


def test_bad_hostlist_and_overlap(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a valid Slurm hostlist"):
        load_settings(write(tmp_path, MINIMAL.replace("gpu-[001-004]", "gpu-[004-001]")))
    twice = MINIMAL + MINIMAL[MINIMAL.index("[[templates]]") :].replace('"t1"', '"t2"')
    with pytest.raises(ConfigError, match="'gpu-001' is in both templates 't1' and 't2'"):
        load_settings(write(tmp_path, twice))


def test_key_of_another_provider_type(tmp_path: Path) -> None:
    text = MINIMAL.replace('region = "us-east-1"', 'region = "us-east-1"\nresource_group = "rg"')
    with pytest.raises(ConfigError, match="key 'resource_group' is only for azure providers"):
        load_settings(write(tmp_path, text))


def test_missing_file_says_how_to_point_at_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no such config file .*--config"):
        load_settings(tmp_path / "absent.toml")


def test_parse_settings_reports_count_of_further_errors() -> None:
    with pytest.raises(ConfigError, match=r"and 1 more"):
        parse_settings({"cluster": {"name": 5, "head_address": 7}})

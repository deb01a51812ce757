"""The built-in provider kinds, as their packages declare them and the entry points list
them: each names its own class, the options model of the keys only its type takes,
credential sources the config understands; a config reads its type's defaults from its
kind."""

from __future__ import annotations

from typing import get_args

import pytest

from clustermgr.config import ProviderSettings
from clustermgr.config.base import CredentialSource
from clustermgr.config.providers import COMMON_KEYS
from clustermgr.core.kinds import image_types, kind_of, kinds, onprem_types, sdk_loggers
from clustermgr.providers.registry import provider_class

BUILT_IN = ["aws", "azure", "ipmi", "local", "openstack", "redfish"]


def test_the_built_ins_are_found_by_their_entry_points() -> None:
    assert set(BUILT_IN) <= set(kinds())
    assert onprem_types() == {"ipmi", "redfish"}
    assert image_types() == ("aws", "azure", "local", "openstack")
    assert {"botocore", "boto3", "azure", "openstack", "keystoneauth"} <= set(sdk_loggers())


@pytest.mark.parametrize("type_name", BUILT_IN)
def test_a_kind_names_its_class_its_options_and_sources(type_name: str) -> None:
    kind = kind_of(type_name)
    assert provider_class(type_name).kind == type_name
    assert kind.options is not None and kind.own_keys
    assert not kind.own_keys & COMMON_KEYS  # its own keys are its options, not common ones
    assert set(ProviderSettings.model_fields) == COMMON_KEYS | {"options"}
    assert set(kind.credential_sources) <= set(get_args(CredentialSource))


def test_a_config_gets_its_kinds_defaults() -> None:
    azure = ProviderSettings(
        name="a", type="azure", region="r", subscription_id="s", resource_group="g"
    )
    assert azure.credentials.source == "default"
    assert (azure.billing.increment_s, azure.billing.minimum_s) == (60, 60)
    local = ProviderSettings(name="l", type="local", region="r")
    assert (local.billing.increment_s, local.billing.minimum_s) == (1, 0)
    assert local.credentials.source == "none"


def test_a_types_own_keys_are_its_options_and_dump_as_the_file_has_them() -> None:
    data = {"name": "a", "type": "aws", "region": "r", "retry_mode": "standard"}
    aws = ProviderSettings.model_validate(data)
    assert type(aws.options).__name__ == "AwsOptions"
    assert aws.option("retry_mode") == "standard" and aws.option("subnet") is None
    assert aws.powered is None and aws.bmc_node_names == []
    dumped = aws.model_dump(mode="json", exclude_unset=True)
    assert dumped == {**data, "credentials": {"source": "chain"}}
    assert ProviderSettings.model_validate(dumped) == aws


def test_an_onprem_types_options_say_what_it_powers() -> None:
    ipmi = ProviderSettings.model_validate(
        {
            "name": "rack",
            "type": "ipmi",
            "region": "hall",
            "credentials": {"source": "password_env", "username": "u", "secret_env": "PW"},
            "bmc_nodes": [{"nodes": "n[1-2]", "address": "{node}-bmc", "instance_type": "big"}],
            "soft_off_timeout_s": 60,
        }
    )
    assert ipmi.powered is not None
    assert ipmi.bmc_node_names == ["n1", "n2"]
    assert ipmi.powered.hardware_classes == {"big"}
    assert ipmi.powered.power_off_s == 60 + 30  # the graceful shutdown, then the hard off

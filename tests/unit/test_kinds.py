"""The built-in provider kinds, as their packages declare them and the entry points list
them: each names its own class, keys that are ProviderSettings fields, credential sources
the config understands; a config reads its type's defaults from its kind."""

from __future__ import annotations

from typing import get_args

import pytest

from clustermgr.config import ProviderSettings
from clustermgr.config.base import CredentialSource
from clustermgr.kinds import image_types, kind_of, kinds, onprem_types, sdk_loggers
from clustermgr.providers.registry import provider_class

BUILT_IN = ["aws", "azure", "ipmi", "local", "openstack", "redfish"]


def test_the_built_ins_are_found_by_their_entry_points() -> None:
    assert set(BUILT_IN) <= set(kinds())
    assert onprem_types() == {"ipmi", "redfish"}
    assert image_types() == ("aws", "azure", "local", "openstack")
    assert {"botocore", "boto3", "azure", "openstack", "keystoneauth"} <= set(sdk_loggers())


@pytest.mark.parametrize("type_name", BUILT_IN)
def test_a_kind_names_its_class_its_fields_and_sources(type_name: str) -> None:
    kind = kind_of(type_name)
    assert provider_class(type_name).kind == type_name
    assert kind.keys <= set(ProviderSettings.model_fields)
    assert set(kind.credential_sources) <= set(get_args(CredentialSource))
    if not kind.onprem:  # ipmi and redfish share the BMC keys; a cloud's are its own
        others = {key for other in kinds().values() if other is not kind for key in other.keys}
        assert not kind.keys & others


def test_a_config_gets_its_kinds_defaults() -> None:
    azure = ProviderSettings(
        name="a", type="azure", region="r", subscription_id="s", resource_group="g"
    )
    assert azure.credentials.source == "default"
    assert (azure.billing.increment_s, azure.billing.minimum_s) == (60, 60)
    local = ProviderSettings(name="l", type="local", region="r")
    assert (local.billing.increment_s, local.billing.minimum_s) == (1, 0)
    assert local.credentials.source == "none"

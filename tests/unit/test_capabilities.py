"""Optional provider capabilities (clustermgr.providers.capabilities): directors and staging
ask the provider type for machine-image copy or object storage; a type that does not offer
one is a single clear line, never an import of a cloud's package nor a traceback."""

from __future__ import annotations

import pytest

from clustermgr.config import ProviderSettings, StagingRegionSettings
from clustermgr.core.errors import ConfigError, StagingError
from clustermgr.providers import capabilities
from clustermgr.providers.capabilities import MachineImages, ObjectCredentials, ObjectStorage
from clustermgr.staging import s3_access

pytestmark = pytest.mark.unit


def _provider(kind: str) -> ProviderSettings:
    return ProviderSettings(name="lab", type=kind, region="lab-1")


def test_a_provider_without_object_storage_is_one_clear_line() -> None:
    with pytest.raises(ConfigError) as caught:
        capabilities.object_storage(_provider("local"))
    assert str(caught.value) == "provider 'lab' (type local) does not offer object storage"
    assert caught.value.exit_code == 2


def test_a_provider_without_machine_image_copy_is_one_clear_line() -> None:
    local = _provider("local")
    assert capabilities.find_machine_images(local) is None
    with pytest.raises(ConfigError, match=r"^provider 'lab' \(type local\) does not offer "):
        capabilities.machine_images(local)


def test_s3_staging_on_a_region_whose_provider_has_no_object_storage() -> None:
    region = StagingRegionSettings(provider="lab", partition="cloud", s3_bucket="b")
    with pytest.raises(StagingError) as caught:
        s3_access.mint(_provider("local"), region, "alice", 900)
    message = str(caught.value)
    assert message == (
        "staging region lab: provider 'lab' (type local) does not offer object storage"
    )
    assert "\n" not in message


def test_aws_offers_both_without_calling_the_cloud() -> None:
    aws = _provider("aws")
    assert isinstance(capabilities.machine_images(aws), MachineImages)
    assert isinstance(capabilities.object_storage(aws), ObjectStorage)


def test_scoped_credentials_never_show_the_secret() -> None:
    shown = repr(ObjectCredentials("AKIAEXAMPLE", "the-secret", "the-token"))
    assert "the-secret" not in shown and "the-token" not in shown

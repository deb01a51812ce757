"""`--debug` turns on every SDK's debug logging and prints tracebacks: on each cloud, with
good credentials and with rejected ones, no secret may appear in what an admin sees (and
would paste into a ticket). Real SDKs against the cloud fakes, the CLI in a child process."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from clustermgr.config import ProviderSettings
from tests.conftest import run_cli
from tests.fakes import aws_harness, azure_harness, openstack_harness


def bad_settings(kind: str, harness: Any) -> ProviderSettings:
    """The provider settings each harness's rejected credentials come from."""
    makers: dict[str, Callable[[], ProviderSettings]] = {
        "aws": lambda: harness.settings(
            name="p1", credentials={"source": "profile", "profile": aws_harness.BAD_PROFILE}
        ),
        "azure": lambda: azure_harness.settings_for(
            harness.fake,
            harness._secret_file("azure-wrong-secret", azure_harness.WRONG_SECRET),
            name="p1",
        ),
        "openstack": lambda: harness.settings(
            name="p1", credentials={"source": "clouds_yaml", "cloud": openstack_harness.BAD_CLOUD}
        ),
    }
    return makers[kind]()


def write_config(path: Path, cluster: str, provider: ProviderSettings) -> Path:
    table = provider.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    path.write_text(tomli_w.dumps({"cluster": {"name": cluster}, "providers": [table]}))
    return path


@pytest.mark.parametrize("kind", ["aws", "azure", "openstack"])
def test_debug_output_never_shows_a_secret(kind: str, tmp_path: Path) -> None:
    module = importlib.import_module(f"tests.fakes.{kind}_harness")
    with module.contract_harness(tmp_path) as harness:
        env = {"CLUSTERMGR_DB": f"sqlite:///{tmp_path / 'cm.db'}"}
        good = write_config(tmp_path / "good.toml", harness.cluster, harness.settings(name="p1"))
        bad = write_config(tmp_path / "bad.toml", harness.cluster, bad_settings(kind, harness))
        runs = {
            "check": run_cli("--debug", "--config", str(good), "providers", "check", "p1", env=env),
            "list": run_cli(
                "--debug", "--config", str(good), "providers", "instances", "p1", env=env
            ),
            "rejected": run_cli(
                "--debug", "--config", str(bad), "providers", "instances", "p1", env=env
            ),
        }
        secrets = list(harness.secrets())
    assert runs["check"].returncode == 0, runs["check"].stdout + runs["check"].stderr
    assert runs["list"].returncode == 0, runs["list"].stderr
    assert runs["rejected"].returncode == 1, runs["rejected"].stderr
    assert "Traceback" in runs["rejected"].stderr  # --debug really printed it
    assert " DEBUG " in runs["list"].stderr  # and the SDKs really logged at DEBUG
    for name, done in runs.items():
        seen = done.stdout + done.stderr
        for secret in secrets:
            assert secret not in seen, f"{kind} {name}: a secret is in the output"

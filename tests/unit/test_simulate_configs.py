"""The simulate configs docs/simulation.md replays are valid configs, and the two variants
say what they vary: a capacity shortage with a fallback, a slurm-mode template."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.config import load_settings

SIMULATE = Path(__file__).resolve().parents[2] / "etc" / "simulate"


@pytest.mark.parametrize("path", sorted(SIMULATE.glob("*.toml")), ids=lambda p: p.name)
def test_every_shipped_simulate_config_loads(path: Path) -> None:
    settings = load_settings(path)
    assert settings.templates and settings.policy.chain


def test_the_variants_ask_for_a_fallback_under_a_capacity_limit_and_slurm_mode() -> None:
    fallback = load_settings(SIMULATE / "cpu-cluster-fallback.toml")
    assert fallback.simulate.capacity == {"cpu": 64}
    assert fallback.template("cpu").fallback_templates == ["cpu-west"]
    assert fallback.provider("aws-west").max_instances == 400
    slurm = load_settings(SIMULATE / "cpu-cluster-slurm.toml")
    assert [t.demand_mode for t in slurm.templates] == ["slurm"]

"""The burst-node user-data: what it carries, and the slurmd version guard, run for real."""

from __future__ import annotations

import subprocess
from pathlib import Path

from clustermgr.config import load_settings
from clustermgr.nodes.bootstrap import render_user_data
from tests.conftest import EXAMPLE_CONFIG


def test_user_data_is_configless_and_carries_no_secret() -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    text = render_user_data(settings, settings.template("aws-a100"), "22.05.8")
    assert "--conf-server '10.0.0.10'" in text
    assert "slurm.conf" not in text.replace("slurm.conf never travels", "")
    assert "BEGIN" not in text and "munge.key" in text  # a path, never key material
    assert "CONTROLLER_VERSION='22.05.8'" in text
    assert "meta-data/tags/instance/$NODE_TAG" in text


def test_newer_slurmd_than_the_controller_refuses_to_join(tmp_path: Path) -> None:
    settings = load_settings(EXAMPLE_CONFIG)
    fake_sbin = tmp_path / "sbin"
    fake_sbin.mkdir()
    slurmd = fake_sbin / "slurmd"
    slurmd.write_text('#!/bin/sh\n[ "$1" = -V ] && echo "slurm 23.02.1" && exit 0\necho JOINED\n')
    slurmd.chmod(0o755)
    settings = settings.model_copy(
        update={"slurm": settings.slurm.model_copy(update={"sbin_dir": fake_sbin})}
    )
    script = tmp_path / "user-data.sh"
    script.write_text(render_user_data(settings, settings.template("local-gpu"), "22.05.8"))
    done = subprocess.run(
        ["/bin/sh", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin", "CLUSTERMGR_NODE": "cloud1"},
    )
    assert done.returncode == 1
    assert "slurmd 23.02.1 is newer than slurmctld 22.05.8: not joining" in done.stderr
    assert "JOINED" not in done.stdout


def test_the_launch_token_is_in_the_user_data_only_never_in_a_repr() -> None:
    from clustermgr.nodes.bootstrap import KeyFetch
    from clustermgr.providers.base import LaunchSpec

    settings = load_settings(EXAMPLE_CONFIG)
    token = "one-time-token-abc123"
    fetch = KeyFetch("https://10.0.0.10:6830/munge-key", "sha256//pin=", token)
    text = render_user_data(settings, settings.template("aws-a100"), "22.05.8", fetch)
    assert f"KEY_TOKEN='{token}'" in text and "KEY_PIN='sha256//pin='" in text
    assert "unset KEY_TOKEN" in text  # gone from the environment before slurmd starts
    spec = LaunchSpec("aws-a100", ("p4d.24xlarge",), "ami-1", user_data=text)
    assert token not in repr(fetch) and token not in repr(spec)

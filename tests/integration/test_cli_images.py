"""`clustermgr images list|show|render|sync|status`, run as the real entry point."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from clustermgr.db.database import Database
from clustermgr.db.models import Provider
from clustermgr.directors import states
from tests.conftest import run_cli

MUNGE_KEY_MATERIAL = "MUNGE-KEY-MATERIAL-must-never-leave-the-head"


@pytest.fixture
def site(tmp_path: Path) -> dict[str, str]:
    """A config, a munge key file, an image definition and its tree; returns the env."""
    key = tmp_path / "munge.key"
    key.write_text(MUNGE_KEY_MATERIAL)
    key.chmod(0o400)
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "hello").write_bytes(b"#!/bin/sh\necho hello\n" * 500)
    defs = tmp_path / "defs"
    defs.mkdir()
    shipped = Path(__file__).resolve().parents[2] / "images"
    (defs / "gpu-node.cloud-init.tmpl").write_text(
        (shipped / "gpu-node.cloud-init.tmpl").read_text()
    )
    toml = (shipped / "gpu-node.toml").read_text()
    (defs / "gpu-node.toml").write_text(
        toml.replace('tree = "/srv/clustermgr/images/gpu-node"', f'tree = "{tree}"')
    )
    db_url = f"sqlite:///{tmp_path / 'cm.db'}"
    config = tmp_path / "clustermgr.toml"
    config.write_text(
        f'[cluster]\nname = "lab"\nhead_address = "10.0.0.10"\n'
        f'[database]\nurl = "{db_url}"\n'
        f'[slurm]\nmunge_key_path = "{key}"\n'
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n'
        f'[images]\ndefinitions_dir = "{defs}"\n'
        f'targets = {{ "director-lab-r1" = "{tmp_path / "director"}" }}\n'
        '[[providers]]\nname = "lab"\ntype = "local"\nregion = "r1"\n'
        '[[providers]]\nname = "east"\ntype = "aws"\nregion = "us-east-1"\n'
    )
    return {"CLUSTERMGR_CONFIG": str(config), "DB": db_url, "DEFS": str(defs)}


def test_list_and_show(site: dict[str, str]) -> None:
    listed = run_cli("images", "list", "--json", env=site)
    assert listed.returncode == 0, listed.stderr
    [image] = json.loads(listed.stdout)
    assert image["name"] == "gpu-node"
    assert image["clouds"] == ["aws", "azure", "local", "openstack"]
    assert image["base"]["aws"] == {"image": "ami-dca37ea5", "region": "us-east-1"}
    shown = run_cli("images", "show", "gpu-node", "--json", env=site)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["revision"] is None  # no database yet: none made either
    assert not Path(site["DB"].removeprefix("sqlite:///")).exists()
    table = run_cli("images", "show", "gpu-node", env=site)
    assert "base.openstack: image=ubuntu-22.04-cuda" in table.stdout
    missing = run_cli("images", "show", "nope", env=site)
    assert missing.returncode == 2
    assert "no image named 'nope'" in missing.stderr and "gpu-node" in missing.stderr


def test_render_carries_facts_and_never_the_munge_key(site: dict[str, str]) -> None:
    done = run_cli(
        "images", "render", "gpu-node", "--provider", "east", "--director-address", "10.9.8.7",
        env=site,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("#cloud-config\n")
    assert "clustermgr-keys" not in text  # nobody serves the key without a token
    assert '"10.0.0.10:/home", "/home", nfs' in text  # head's NFS export
    assert '"10.9.8.7:/srv/clustermgr/images/gpu-node/opt/site", "/opt/site"' in text
    assert "CLUSTERMGR_CONF_SERVER=10.0.0.10" in text
    [encoded] = [
        entry["content"]
        for entry in yaml.safe_load(text)["write_files"]
        if entry["path"] == "/usr/local/sbin/clustermgr-bootstrap"
    ]
    script = base64.b64decode(encoded).decode()
    assert "PROVIDER_TYPE='aws'" in script and "--conf-server '10.0.0.10'" in script
    for rendered in (text, script):
        assert MUNGE_KEY_MATERIAL not in rendered
        assert base64.b64encode(MUNGE_KEY_MATERIAL.encode()).decode()[:20] not in rendered
    bad = run_cli("images", "render", "gpu-node", "--provider", "nowhere", env=site)
    assert bad.returncode == 2 and "--provider 'nowhere'" in bad.stderr


def test_render_of_the_shipped_image_needs_no_config(tmp_path: Path) -> None:
    done = run_cli(
        "--config", str(tmp_path / "none.toml"), "images", "render", "gpu-node",
        "--provider", "local", "--director-address", "10.213.0.2",
        env={"CLUSTERMGR_IMAGES_DIR": ""},
    )  # fmt: skip
    # an explicit --config that does not exist is an error, as for every command
    assert done.returncode == 2 and "no such config file" in done.stderr
    plain = run_cli("images", "render", "gpu-node", env={"CLUSTERMGR_CONFIG": ""})
    assert plain.returncode == 0, plain.stderr
    assert "#cloud-config" in plain.stdout


HEAD = 'name = "bad"\ntree = "/t"\nuser_data = "x.tmpl"\n'
BAD_IMAGES = [
    ('name = "bad"\ntree = "rel/path"\nuser_data = "x.tmpl"\n', "bad.toml: tree: "),
    (HEAD + "colour = 1\n", "bad.toml: colour: unknown key"),
    (HEAD + '[base.vmware]\nimage = "x"\n', "bad.toml: base: 'vmware' is not a provider type"),
    (HEAD + '[base.aws]\nregion = "r"\n', "bad.toml: base.aws.image: "),
    (HEAD.replace("x.tmpl", "missing.tmpl"), "bad.toml: user_data: cannot read"),
    (HEAD.replace('"bad"', '"other"'), "bad.toml: name: 'other' must match"),
    ('name = "bad"\ntree = \n', "bad.toml: invalid TOML"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_IMAGES)
def test_bad_image_toml_is_one_line_exit_2(site: dict[str, str], text: str, expected: str) -> None:
    defs = Path(site["DEFS"])
    (defs / "x.tmpl").write_text("#cloud-config\n")
    (defs / "bad.toml").write_text(text)
    done = run_cli("images", "list", env=site)
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert expected in lines[0] and str(defs) in lines[0]


def test_sync_then_status_json(site: dict[str, str], tmp_path: Path) -> None:
    assert run_cli("db", "upgrade", env=site).returncode == 0
    db = Database(site["DB"])
    with db.session() as session:
        session.add(Provider(name="lab", type="local", region="r1", credentials_source="none"))
        session.flush()
        director = states.ensure(session, "lab", "r1", actor="test")
        director.state = states.DirectorState.READY.value
    db.dispose()

    done = run_cli("images", "sync", env=site)  # not a TTY: plain lines

    assert done.returncode == 0, done.stdout + done.stderr
    assert "image gpu-node: r1-" in done.stdout and "(new revision;" in done.stdout
    assert "-> director-lab-r1: verified; sent " in done.stdout
    assert (tmp_path / "director" / "gpu-node" / "bin" / "hello").exists()
    status = run_cli("images", "status", "--json", env=site)
    assert status.returncode == 0, status.stderr
    [row] = json.loads(status.stdout)
    assert row["image"] == "gpu-node" and row["director"] == "director-lab-r1"
    assert row["state"] == "verified" and row["revision"].startswith("r1-")
    assert row["bytes_sent"] > 10_000 and row["verified_at"] and row["error"] == ""
    table = run_cli("images", "status", env=site)
    assert "director-lab-r1" in table.stdout and "verified" in table.stdout
    again = run_cli(
        "images", "sync", "gpu-node", "--director", "director-lab-r1", "--json", env=site
    )
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["revisions"][0]["created"] is False
    assert report["replicas"][0]["state"] == "verified"
    unknown = run_cli("images", "sync", "--director", "director-nowhere", env=site)
    assert unknown.returncode == 2 and "no director named 'director-nowhere'" in unknown.stderr

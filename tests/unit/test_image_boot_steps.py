"""An image definition's boot steps ([packages], [name_service]): what load_image and the
renderers refuse, in one line, before any node boots with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustermgr.core.errors import ConfigError
from clustermgr.imaging.definitions import load_image
from clustermgr.imaging.nameservice import DirectoryFacts, NameService, render_nameservice_script
from clustermgr.imaging.packages import render_packages_script

pytestmark = pytest.mark.unit

DIRECTOR_MOUNT = (
    '[[nfs_mounts]]\nserver = "director"\nexport = "/srv/node/opt/site"\npath = "/opt/site"\n'
)
HEAD_MOUNT = '[[nfs_mounts]]\nserver = "head"\nexport = "/home"\npath = "/home"\n'


def write(tmp_path: Path, packages: str, *, mounts: str = DIRECTOR_MOUNT, tmpl: str = "") -> Path:
    (tmp_path / "node.tmpl").write_text(tmpl or "#cloud-config\n# @{packages_b64}\n")
    path = tmp_path / "node.toml"
    path.write_text(
        'name = "node"\ntree = "/srv/node"\nuser_data = "node.tmpl"\n'
        f"{mounts}[packages]\n{packages}"
    )
    return path


GOOD = (
    'mirror = "/opt/site/mirror/debian"\nsuite = "bookworm"\n'
    'keyring = "/opt/site/mirror/debian/key.gpg"\ninstall = ["dcgm", "nvidia-fs=2.17.5-1"]\n'
)


def test_a_mirror_on_the_director_mount_loads_and_renders_its_packages(tmp_path: Path) -> None:
    image = load_image(write(tmp_path, GOOD))
    assert image.definition.packages is not None
    script = render_packages_script(image.definition.packages)
    assert "PACKAGES='dcgm nvidia-fs=2.17.5-1'" in script
    assert "MIRROR='/opt/site/mirror/debian'" in script


def test_without_packages_the_step_does_nothing() -> None:
    assert "PACKAGES=''" in render_packages_script(None)


@pytest.mark.parametrize(
    ("packages", "mounts", "expected"),
    [
        (
            GOOD.replace("/opt/site/mirror/debian/key.gpg", "/etc/apt/key.gpg"),
            DIRECTOR_MOUNT,
            "keyring '/etc/apt/key.gpg' must be under a director mount (/opt/site)",
        ),
        (GOOD, HEAD_MOUNT, "must be under a director mount (none in nfs_mounts)"),
        (
            GOOD.replace('"dcgm"', '"dcgm; curl evil"'),
            DIRECTOR_MOUNT,
            "packages.install: 'dcgm; curl evil' is not a Debian package name",
        ),
        (GOOD.replace('"bookworm"', '"book worm"'), DIRECTOR_MOUNT, "packages.suite"),
        (GOOD.replace('"/opt/site/mirror/debian"', '"opt/x"'), DIRECTOR_MOUNT, "packages.mirror"),
        (GOOD.replace('install = ["dcgm", "nvidia-fs=2.17.5-1"]', "install = []"), DIRECTOR_MOUNT,
         "packages.install"),
    ],
)  # fmt: skip
def test_a_bad_packages_section_is_one_config_error_line(
    tmp_path: Path, packages: str, mounts: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_image(write(tmp_path, packages, mounts=mounts))
    assert expected in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_template_that_never_writes_the_packages_step_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"never writes @\{packages_b64\}"):
        load_image(write(tmp_path, GOOD, tmpl="#cloud-config\n"))


def test_the_name_service_follows_the_replicas_tls() -> None:
    service = NameService(ca_file="/opt/site/etc/ca.pem")
    ldaps = render_nameservice_script(
        service, DirectoryFacts("dc=x,dc=org", 636, "ldaps"), "fd00::5"
    )
    assert "URI='ldaps://[fd00::5]:636/'" in ldaps and "SSL='on'" in ldaps
    plain = render_nameservice_script(
        service, DirectoryFacts("dc=x,dc=org", 389, "none"), "10.1.0.5"
    )
    assert "URI='ldap://10.1.0.5:389/'" in plain and "SSL='off'" in plain
    assert "URI=''" in render_nameservice_script(None, None, "10.1.0.5")  # does nothing


def test_a_name_service_without_ldap_or_with_a_strange_suffix_is_refused() -> None:
    service = NameService()
    with pytest.raises(ConfigError, match=r"has no \[ldap\]"):
        render_nameservice_script(service, None, "10.1.0.5")
    with pytest.raises(ConfigError, match=r"cannot go in nslcd\.conf"):
        render_nameservice_script(
            service, DirectoryFacts("dc=x\nuri ldap://evil", 389, "none"), "10.1.0.5"
        )


def test_a_template_that_never_writes_the_name_service_step_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD, tmpl="#cloud-config\n# @{packages_b64}\n")
    path.write_text(
        path.read_text().replace("[packages]", '[name_service]\nkind = "nslcd"\n[packages]')
    )
    with pytest.raises(ConfigError, match=r"name_service: .* never writes @\{nameservice_b64\}"):
        load_image(path)

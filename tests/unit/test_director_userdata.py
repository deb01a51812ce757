"""A director's user data: the lab director's facts from [ldap] and [images], a
user_data_file template, and the one-line errors when neither can be made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustermgr.config import Settings, parse_settings
from clustermgr.core.errors import ConfigError
from clustermgr.core.ldap_attrs import DEFAULT_REPLICA_ATTRIBUTES, effective
from clustermgr.directors.userdata import render_user_data
from clustermgr.providers.base import LaunchSpec, ProviderError
from clustermgr.providers.local.director import parse_boot, staging_module_conf

NAME = "director-local-here"


def settings(
    tmp_path: Path,
    provider_type: str = "local",
    staging: dict[str, Any] | None = None,
    **director: Any,
) -> Settings:
    provider: dict[str, Any] = {"name": "p", "type": provider_type, "region": "here"}
    if provider_type == "local":
        provider["subnet"] = "10.9.0.0/24"
    else:
        provider["credentials"] = {"source": "clouds_yaml", "cloud": "site"}
    data: dict[str, Any] = {
        "providers": [provider],
        "templates": [
            {
                "name": "t",
                "provider": "p",
                "partition": "cloud",
                "nodes": "n-[1-2]",
                "instance_types": ["local.cpu"],
                "image": "x",
                "cpus": 2,
                "memory_mb": 100,
            }
        ],
        "directors": [{"provider": "p", "instance_type": "local.cpu", "image": "x", **director}],
        "images": {"rsync_module": "site-images", "rsync_port": 8873},
        "ldap": {
            "suffix": "dc=example,dc=org",
            "bases": ["ou=people,dc=example,dc=org"],
            "head": {
                "uri": "ldap://head",
                "bind_dn": "cn=admin,dc=example,dc=org",
                "credentials": {"source": "password_file", "secret_file": "/h.secret"},
            },
            "replica": {
                "admin_dn": "cn=admin,cn=config",
                "credentials": {"source": "password_file", "secret_file": "/r.secret"},
            },
        },
    }
    if staging is not None:
        data["staging"] = {"regions": [{"provider": "p", "partition": "cloud", **staging}]}
    return parse_settings(data)


def director_spec(user_data: str) -> LaunchSpec:
    return LaunchSpec(
        template=NAME,
        instance_types=("local.cpu",),
        image="x",
        node_names=(NAME,),
        user_data=user_data,
        tags={"clustermgr-role": "director"},
    )


def test_a_local_director_gets_the_lab_facts_its_provider_reads(tmp_path: Path) -> None:
    conf = settings(tmp_path)
    text = render_user_data(conf, conf.directors[0], NAME)
    boot = parse_boot(director_spec(text))
    assert boot.suffix == "dc=example,dc=org"
    assert boot.admin_dn == "cn=admin,dc=example,dc=org"  # cn=config DN: the rootdn default
    assert boot.password_file == Path("/r.secret")
    assert (boot.rsync_module, boot.rsync_port, boot.ldap_port) == ("site-images", 8873, 389)
    assert boot.image_root is None
    assert "munge" not in text  # a director never holds the munge key
    # the head's writable module beside the read-only one, by a password in a file
    assert (boot.push_module, boot.push_user) == ("site-images-push", "clustermgr")
    assert boot.push_secrets == conf.daemon.state_dir / "images-push.secrets"
    paths = text.replace("/r.secret", "").replace(str(boot.push_secrets), "")
    paths = paths.replace("push_secrets = ", "")
    assert "secret" not in paths  # paths, never a password
    # the replica's slapd lets clients read the [ldap] allow-list, nothing else
    assert conf.ldap is not None
    assert boot.attributes == effective(conf.ldap.attributes)
    bare = "".join(line for line in text.splitlines(True) if not line.startswith("attributes"))
    with pytest.raises(ProviderError, match="userPassword holds password hashes"):
        parse_boot(director_spec(bare + 'attributes = "uid,userPassword"\n'))
    assert parse_boot(director_spec(bare)).attributes == DEFAULT_REPLICA_ATTRIBUTES
    template = parse_boot(director_spec(bare + 'attributes = "objectClass,uid,sshPublicKey"\n'))
    assert template.attributes == ("objectClass", "uid", "sshPublicKey")


def test_a_user_data_file_is_rendered_with_the_facts(tmp_path: Path) -> None:
    template = tmp_path / "director.tmpl"
    template.write_text("#cloud-config\n# @{director} @{ldap_suffix} @{rsync_module} @@x\n")
    conf = settings(tmp_path, "openstack", user_data_file=str(template))
    text = render_user_data(conf, conf.directors[0], NAME)
    assert text == f"#cloud-config\n# {NAME} dc=example,dc=org site-images @x\n"
    template.write_text("@{nope}")
    with pytest.raises(ConfigError, match=r"unknown placeholder @\{nope\}"):
        render_user_data(conf, conf.directors[0], NAME)
    template.unlink()
    with pytest.raises(ConfigError, match="cannot read it"):
        render_user_data(conf, conf.directors[0], NAME)


def test_a_cloud_director_without_a_file_gets_none(tmp_path: Path) -> None:
    conf = settings(tmp_path, "openstack")
    assert render_user_data(conf, conf.directors[0], NAME) == ""


def test_a_lab_director_without_ldap_passwords_says_what_to_set(tmp_path: Path) -> None:
    conf = settings(tmp_path)
    no_ldap = conf.model_copy(update={"ldap": None})
    with pytest.raises(ConfigError, match="needs an \\[ldap\\] table"):
        render_user_data(no_ldap, no_ldap.directors[0], NAME)


@pytest.mark.parametrize("old_key", ["munge_key_file", "key_push"])
def test_a_director_that_would_hold_the_munge_key_is_refused_in_one_line(
    tmp_path: Path, old_key: str
) -> None:
    value: Any = "/etc/munge/munge.key" if old_key == "munge_key_file" else {"identity_file": "/k"}
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, **{old_key: value})
    message = str(caught.value)
    assert "\n" not in message
    assert f"{old_key}: a director no longer holds the munge key" in message
    assert "remove it" in message


def test_a_lab_director_serves_the_staging_module_its_region_names(tmp_path: Path) -> None:
    region = {
        "rsync_target": "rsync://{director}:8873/clustermgr-staging",
        "node_root": "/srv/staging",
        "rsyncd_secrets": "/etc/clustermgr/rsyncd.secrets",
    }
    conf = settings(tmp_path, staging=region)
    text = render_user_data(conf, conf.directors[0], NAME)
    boot = parse_boot(director_spec(text))
    assert boot.staging_module == "clustermgr-staging"
    assert boot.staging_root == Path("/srv/staging")
    assert boot.rsyncd_secrets == Path("/etc/clustermgr/rsyncd.secrets")
    module = staging_module_conf(boot)
    assert "path = /srv/staging/%RSYNC_USER_NAME%\n" in module
    for line in ("use chroot = yes", "uid = %RSYNC_USER_NAME%", "auth users = root:deny, *"):
        assert f"{line}\n" in module
    assert "secrets file = /etc/clustermgr/rsyncd.secrets\nstrict modes = yes\n" in module
    plain = settings(tmp_path)
    boot = parse_boot(director_spec(render_user_data(plain, plain.directors[0], NAME)))
    assert staging_module_conf(boot) == ""  # no staging region: no module


def test_a_daemon_staging_target_without_a_secrets_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs rsyncd_secrets"):
        settings(tmp_path, staging={"rsync_target": "rsync://h/m"})
    with pytest.raises(ConfigError, match="write a daemon as rsync://"):
        settings(tmp_path, staging={"rsync_target": "h::m", "rsyncd_secrets": "/s"})

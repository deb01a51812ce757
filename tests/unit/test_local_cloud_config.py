"""What the local provider carries out of an image's cloud-config, and what it refuses in one
line before any instance boots (providers/local/cloudinit.py). Booting one for real:
tests/e2e/test_directors.py."""

from __future__ import annotations

import base64

import pytest
from pydantic import ValidationError

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.base import LaunchSpec
from clustermgr.providers.local.cloudinit import (
    BindMount,
    BootPlan,
    LabDirector,
    parse,
    stand_ins,
)
from clustermgr.providers.local.kind import LocalOptions
from clustermgr.providers.local.shapes import slurmd_boot_from

pytestmark = pytest.mark.unit

BOOT = "#!/bin/sh\nexec /usr/sbin/slurmd -D -N x --conf-server '10.0.0.1:6817'\n"
NODE_ENV = "CLUSTERMGR_IMAGE=base\nCLUSTERMGR_IMAGE_PATH=/srv/images/base\n"


def cloud_config(*, mounts: str = "", extra: str = "", path: str = "/usr/local/sbin/boot") -> str:
    boot = base64.b64encode(BOOT.encode()).decode()
    return f"""#cloud-config
mounts:{mounts or " []"}
write_files:
  - path: /etc/clustermgr/node.env
    permissions: "0644"
    content: |
      CLUSTERMGR_IMAGE=base
      CLUSTERMGR_IMAGE_PATH=/srv/images/base
  - path: {path}
    permissions: "0755"
    encoding: b64
    content: {boot}
runcmd:
  - [sh, -c, "exec systemd-run --unit=clustermgr-slurmd /usr/local/sbin/boot"]
  - echo done
{extra}"""


HEAD_AND_DIRECTOR = """
  - ["10.0.0.1:/home", "/home", nfs, "defaults,_netdev"]
  - ["10.0.0.2:/srv/images/base/opt/site", "/opt/site", nfs, "ro,defaults,_netdev"]"""


def spec(user_data: str) -> LaunchSpec:
    return LaunchSpec("t", ("local.cpu",), "local", ("n-1",), user_data=user_data)


def refusal(user_data: str, stand_in: dict[str, str] | None = None) -> str:
    launch = spec(user_data)
    with pytest.raises(ProviderError) as caught:
        stand_ins(launch, parse(launch), stand_in or {}, [])
    assert caught.value.kind is ErrorKind.INVALID
    message = str(caught.value.args[0])
    assert "\n" not in message
    return message


def test_files_mounts_and_runcmd_are_carried_out_in_order_with_their_stand_ins() -> None:
    launch = spec(cloud_config(mounts=HEAD_AND_DIRECTOR))
    boot = slurmd_boot_from(launch)
    assert boot.conf_server == "10.0.0.1:6817"  # from the boot script among write_files
    assert boot.cloud_config is not None
    config = boot.cloud_config
    assert [(f.path, f.mode) for f in config.files] == [
        ("/etc/clustermgr/node.env", 0o644),
        ("/usr/local/sbin/boot", 0o755),
    ]
    assert config.files[0].content == NODE_ENV and config.files[1].content == BOOT
    assert config.runcmd == (
        ("sh", "-c", "exec systemd-run --unit=clustermgr-slurmd /usr/local/sbin/boot"),
        ("sh", "-c", "echo done"),
    )
    director = LabDirector("10.0.0.2", "/var/lib/local/directors/lc-1/image")
    binds = stand_ins(launch, config, {"10.0.0.1:/home": "/lab/home"}, [director])
    assert binds == (
        BindMount("/lab/home", "/home", read_only=False),
        BindMount("/var/lib/local/directors/lc-1/image/base/opt/site", "/opt/site", True),
    )
    plan = BootPlan("/scratch", config.files, binds, config.runcmd)
    assert BootPlan.from_json(plan.to_json()) == plan


def test_an_export_below_a_named_one_maps_below_its_host_path() -> None:
    mounts = '\n  - ["filer:/proj/a", "/opt/proj/a", nfs4, "rw"]'
    launch = spec(cloud_config(mounts=mounts))
    [bind] = stand_ins(launch, parse(launch), {"filer:/proj": "/lab/proj"}, [])
    assert bind == BindMount("/lab/proj/a", "/opt/proj/a", read_only=False)


def test_an_nfs_mount_without_a_stand_in_is_refused_naming_the_setting() -> None:
    message = refusal(cloud_config(mounts=HEAD_AND_DIRECTOR), {"10.0.0.1:/home": "/lab/home"})
    assert "10.0.0.2:/srv/images/base/opt/site" in message
    assert 'nfs_stand_in ("10.0.0.2:/srv/images/base/opt/site" = "/host/path")' in message


def test_a_directors_export_outside_the_image_path_is_not_its_image() -> None:
    mounts = '\n  - ["10.0.0.2:/etc", "/opt/etc", nfs, "ro"]'
    launch = spec(cloud_config(mounts=mounts))
    director = LabDirector("10.0.0.2", "/d/image")
    with pytest.raises(ProviderError, match="no stand-in for this NFS export"):
        stand_ins(launch, parse(launch), {}, [director])


@pytest.mark.parametrize(
    ("user_data", "said"),
    [
        (cloud_config(extra="packages: [htop]\n"), "carries out only write_files, mounts"),
        (cloud_config(path="/usr/bin/boot"), "writes only under /etc, /usr/local, /opt, /run"),
        (cloud_config(mounts='\n  - ["/dev/sdb1", "/data", ext4]'), "mounts only NFS"),
        ("#cloud-config\nruncmd: [[1, 2]]\n", "runcmd"),
        ("#cloud-config\n[unclosed\n", "is not YAML"),
    ],
)
def test_what_a_local_instance_cannot_carry_out_is_refused_in_one_line(
    user_data: str, said: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        parse(spec(user_data))
    assert caught.value.kind is ErrorKind.INVALID
    assert said in str(caught.value.args[0]) and "\n" not in str(caught.value.args[0])


@pytest.mark.parametrize(
    ("stand_in", "said"),
    [
        ({"head/home": "/lab/home"}, "SERVER:/EXPORT"),
        ({"head:home": "/lab/home"}, "SERVER:/EXPORT"),
        ({"head:/home": "lab/home"}, "must be absolute"),
    ],
)
def test_a_bad_nfs_stand_in_setting_is_refused(stand_in: dict[str, str], said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        LocalOptions.model_validate({"nfs_stand_in": stand_in})

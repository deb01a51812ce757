"""A local-provider director for real: slapd and an rsync daemon in their own network
namespace, reachable from the host across the bridge, seen healthy by the default TCP check
and stopped by pid. (No Slurm: a director runs no slurmd.)"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.directors.health import tcp_open
from clustermgr.providers.base import LaunchSpec
from clustermgr.providers.local import net
from clustermgr.providers.local.director import (
    ROLE_DIRECTOR,
    TAG_ROLE,
    is_director_spec,
    parse_boot,
    spawn_director,
)
from tests.fakes.local_harness import skip_unless_possible

pytestmark = pytest.mark.integration

SUBNET = net.Subnet.parse("10.213.207.0/24")
SUFFIX = "dc=example,dc=org"


def spec_for(user_data: str) -> LaunchSpec:
    return LaunchSpec(
        template="director-local-here",
        instance_types=("local.cpu",),
        image="local",
        node_names=("director-local-here",),
        user_data=user_data,
        tags={TAG_ROLE: ROLE_DIRECTOR},
    )


def wait_for_ports(address: str, ports: tuple[int, ...], timeout_s: float = 15) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(tcp_open(address, port, 0.5) for port in ports):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[tuple[str, str, tuple[int, int | None]]]:
    skip_unless_possible()
    for tool in ("slapd", "slaptest", "rsync", "ldapwhoami"):
        if not net.tool(tool):
            pytest.skip(f"{tool} is not installed")
    instance_id = f"lc-{secrets.token_hex(4)}"
    address = SUBNET.instance_addresses()[0]
    net.ensure_bridge_for(SUBNET)
    net.create_network(instance_id, SUBNET, address)
    password = tmp_path / "ldap.secret"
    password.write_text("director-secret\n")
    password.chmod(0o600)
    user_data = (
        f'#clustermgr-director\nsuffix = "{SUFFIX}"\n'
        f'password_file = "{password}"\nimage_root = "{tmp_path / "image"}"\n'
    )
    leader = (0, None)
    try:
        boot = parse_boot(spec_for(user_data))
        leader = spawn_director(instance_id, boot, tmp_path / "work", tmp_path / "director.log")
        yield instance_id, address, leader
    finally:
        net.stop_instances({instance_id: leader})
        net.delete_network(instance_id)
        net.remove_bridge_for(SUBNET)


def test_the_director_serves_ldap_and_rsync_from_its_namespace(
    instance: tuple[str, str, tuple[int, int | None]], tmp_path: Path
) -> None:
    instance_id, address, (pid, started) = instance
    assert wait_for_ports(address, (389, 873)), (tmp_path / "director.log").read_text()
    whoami = subprocess.run(
        ["ldapwhoami", "-x", "-H", f"ldap://{address}", "-D", f"cn=admin,{SUFFIX}", "-w",
         "director-secret"],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    assert whoami.stdout.strip() == f"dn:cn=admin,{SUFFIX}", whoami.stderr
    rsync = shutil.which("rsync") or "rsync"
    (tmp_path / "image" / "etc").mkdir(parents=True)
    (tmp_path / "image" / "etc" / "motd").write_text("replicated\n")
    listing = subprocess.run(
        [rsync, f"rsync://{address}/image/etc/"],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    assert "motd" in listing.stdout, listing.stderr
    # every process of the director is in its namespace (or its session leader): stopped
    assert net.alive(pid, started) and net.namespace_pids(instance_id)
    net.stop_instances({instance_id: (pid, started)})
    assert not net.alive(pid, started) and net.namespace_pids(instance_id) == []
    assert not tcp_open(address, 389, 0.5)


def test_a_director_spec_needs_its_facts() -> None:
    assert is_director_spec(spec_for(""))
    with pytest.raises(ProviderError) as caught:
        parse_boot(spec_for("#!/bin/sh\n"))
    assert caught.value.kind is ErrorKind.INVALID and "#clustermgr-director" in str(caught.value)
    with pytest.raises(ProviderError, match="password_file"):
        parse_boot(spec_for('#clustermgr-director\nsuffix = "dc=x"\nimage_root = "/tmp/x"\n'))
    facts = '#clustermgr-director\nsuffix = "dc=x"\npassword_file = "/p"\n'
    with pytest.raises(ProviderError, match="tls_cert_file and tls_key_file go together"):
        parse_boot(spec_for(facts + 'tls_cert_file = "/etc/d.pem"\n'))
    with pytest.raises(ProviderError, match="an absolute path"):
        parse_boot(spec_for(facts + 'tls_cert_file = "d.pem"\ntls_key_file = "/etc/d.key"\n'))

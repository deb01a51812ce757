"""A burst node's users and groups come from its region's director (issue 23 item 2): the
name-service step `clustermgr images render` writes for an image with [name_service], run
in a mount namespace standing in for the node (its own /etc/nslcd.conf, /etc/nsswitch.conf
and /run), then the real nslcd and glibc's NSS (libnss-ldapd) resolve a user who exists only
in LDAP, over StartTLS to a real slapd with the certificate checked. With another CA the
same lookups find nothing: the node never trusts an unverified server."""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import cannot_run, run_cli
from tests.labs.directorlab import ALICE, GROUPS
from tests.services.slapd import SUFFIX, Slapd, available, directory_ldif, make_server, make_tls

# The node, in a private mount namespace: its files bound over the host's, its own /run (no
# systemd there, so the step restarts nothing of the host's; nslcd's socket in it).
NODE = """set -eu
conf=$1 switch=$2 step=$3 out=$4
mount -t tmpfs tmpfs /run
install -d -o nslcd -g nslcd /run/nslcd
mount --bind "$conf" /etc/nslcd.conf
mount --bind "$switch" /etc/nsswitch.conf
sh "$step"
sh "$step"
nslcd
trap 'kill "$(cat /run/nslcd/nslcd.pid)"' EXIT
tries=0
until [ -S /run/nslcd/socket ] || [ "$tries" -ge 50 ]; do sleep 0.1; tries=$((tries + 1)); done
getent passwd alice >"$out/passwd" || true
id alice >"$out/id" 2>&1 || true
"""


@pytest.fixture(scope="module")
def node_files() -> Iterator[Path]:
    """Where the node's CA files live: nslcd reads them after dropping to its own user, so
    not under pytest's root-only directories."""
    where = Path(tempfile.mkdtemp(prefix="cm-node-ca"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def on_node(ca_file: Path, node_files: Path, name: str) -> Path:
    copy = node_files / name
    shutil.copyfile(ca_file, copy)
    copy.chmod(0o644)
    return copy


@pytest.fixture(scope="module")
def directory(
    tmp_path_factory: pytest.TempPathFactory, node_files: Path
) -> Iterator[tuple[Slapd, Path]]:
    missing = available() or next(
        (f"no {tool}" for tool in ("nslcd", "unshare", "getent") if not shutil.which(tool)), None
    )
    if missing or not Path("/etc/nslcd.conf").exists():
        cannot_run(f"cannot stand in for a node's name service: {missing or 'no nslcd.conf'}")
    workdir = tmp_path_factory.mktemp("director-ldap")
    tls = make_tls(workdir / "tls")
    server = make_server(
        workdir / "slapd", seed_ldif=f"{directory_ldif()}\n{ALICE}\n{GROUPS}", tls=tls
    )
    server.start()
    try:
        yield server, on_node(tls.ca_file, node_files, "director-ca.pem")
    finally:
        server.destroy()


def site(tmp_path: Path, server: Slapd, ca_on_node: Path) -> dict[str, str]:
    """clustermgr.toml with [ldap] (the director's replica: StartTLS on the server's port)
    and an image whose [name_service] trusts `ca_on_node`."""
    secret = tmp_path / "ldap.secret"
    secret.write_text(server.admin_password + "\n")
    secret.chmod(0o600)
    defs = tmp_path / "defs"
    defs.mkdir()
    shipped = Path(__file__).resolve().parents[2] / "images" / "gpu-node.cloud-init.tmpl"
    (defs / "node.cloud-init.tmpl").write_text(shipped.read_text())
    (defs / "node.toml").write_text(
        'name = "node"\ntree = "/srv/node"\nuser_data = "node.cloud-init.tmpl"\n'
        '[base.local]\nimage = "local.gpu"\n'
        f'[name_service]\nca_file = "{ca_on_node}"\n'
    )
    config = tmp_path / "clustermgr.toml"
    credentials = f'{{ source = "password_file", secret_file = "{secret}" }}'
    config.write_text(
        '[cluster]\nname = "lab"\nhead_address = "127.0.0.1"\n'
        f'[images]\ndefinitions_dir = "{defs}"\n'
        f'[ldap]\nsuffix = "{SUFFIX}"\nbases = ["ou=people,{SUFFIX}", "ou=groups,{SUFFIX}"]\n'
        f'[ldap.head]\nuri = "{server.uri}"\nbind_dn = "{server.admin_dn}"\ntls = "none"\n'
        f"credentials = {credentials}\n"
        f'[ldap.replica]\nport = {server.port}\nadmin_dn = "{server.admin_dn}"\n'
        f'tls = "starttls"\nca_file = "{ca_on_node}"\ncredentials = {credentials}\n'
    )
    return {"CLUSTERMGR_CONFIG": str(config)}


def boot_node(tmp_path: Path, env: dict[str, str]) -> tuple[str, str, str]:
    """Render the user-data, run its name-service step on the node; what the node's
    nslcd.conf says and what `getent passwd alice` and `id alice` print there."""
    done = run_cli(
        "images", "render", "node", "--provider", "local", "--director-address", "127.0.0.1",
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cloud_config = yaml.safe_load(done.stdout)
    [entry] = [f for f in cloud_config["write_files"] if f["path"].endswith("-nameservice")]
    [step] = cloud_config["runcmd"]
    assert "clustermgr-nameservice && exec systemd-run" in step[-1]  # before slurmd
    script = tmp_path / "clustermgr-nameservice"
    script.write_bytes(base64.b64decode(entry["content"]))
    conf, switch, out = tmp_path / "nslcd.conf", tmp_path / "nsswitch.conf", tmp_path / "out"
    conf.write_text("")
    shutil.copyfile("/etc/nsswitch.conf", switch)
    out.mkdir()
    node = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", NODE, "node",
         str(conf), str(switch), str(script), str(out)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert node.returncode == 0, node.stderr
    lines = [line.split() for line in switch.read_text().splitlines()]
    for database in ("passwd:", "group:"):
        [entries] = [line[1:] for line in lines if line and line[0] == database]
        assert entries.count("ldap") == 1 and entries[0] == "files", entries  # run twice
    return conf.read_text(), (out / "passwd").read_text(), (out / "id").read_text()


def test_a_user_only_ldap_knows_resolves_on_the_node_over_starttls(
    tmp_path: Path, directory: tuple[Slapd, Path]
) -> None:
    server, ca_file = directory
    conf, passwd, ident = boot_node(tmp_path, site(tmp_path, server, ca_file))
    assert f"uri ldap://127.0.0.1:{server.port}/\n" in conf
    assert f"base {SUFFIX}\nssl start_tls\ntls_reqcert demand\ntls_cacertfile {ca_file}\n" in conf
    assert passwd == "alice:*:20001:20001:Alice:/home/alice:/bin/bash\n"
    assert ident.strip() == "uid=20001(alice) gid=20001(alice) groups=20001(alice),30001(gpu-users)"


def test_a_director_whose_certificate_the_node_cannot_verify_resolves_no_one(
    tmp_path: Path, directory: tuple[Slapd, Path], node_files: Path
) -> None:
    server, _ = directory
    # a CA that signed nothing of the server's
    stranger = on_node(make_tls(tmp_path / "other-ca").ca_file, node_files, "other-ca.pem")
    _, passwd, ident = boot_node(tmp_path, site(tmp_path, server, stranger))
    assert passwd == ""
    assert "no such user" in ident

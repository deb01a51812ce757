"""A local region's director for the tests: the head's LDAP holding `alice` (a user only the
head has) and her groups, an image `base` (a file and a symlink, and with `node_image` a
program under opt/site and the shipped cloud-config as its user-data), the config tables
that declare a lab director for provider "local" replicating both (`director_tables`), and a
head whose slurmctld resolves users from that LDAP (`head_launcher`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from clustermgr.imaging.definitions import default_images_dir
from tests.services.slapd import (
    SUFFIX,
    Slapd,
    TlsFiles,
    available,
    directory_ldif,
    make_server,
)

ALICE = f"""dn: uid=alice,ou=people,{SUFFIX}
objectClass: inetOrgPerson
objectClass: posixAccount
uid: alice
cn: Alice
sn: A
uidNumber: 20001
gidNumber: 20001
homeDirectory: /home/alice
loginShell: /bin/bash
"""
GROUPS = f"""dn: cn=alice,ou=groups,{SUFFIX}
objectClass: posixGroup
cn: alice
gidNumber: 20001

dn: cn=gpu-users,ou=groups,{SUFFIX}
objectClass: posixGroup
cn: gpu-users
gidNumber: 30001
memberUid: alice
"""
MOTD = "served by the director\n"
HELLO = "hello from the site tree"
IMAGE_PATH = "/srv/clustermgr/images/base"  # the node image's director_path
# The head in its own mount namespace: its users from its LDAP (nslcd, as a head node is
# set up), its /home the lab's export, then slurmctld (the argv after these). /run is its
# own (nslcd's socket), with this machine's munge socket moved into it.
HEAD_NSS = """set -eu
conf=$1 switch=$2 home=$3 scratch=$4
shift 4
mount --bind "$conf" /etc/nslcd.conf
mount --bind "$switch" /etc/nsswitch.conf
mount --bind "$home" /home
mount --bind /run/munge "$scratch"
mount -t tmpfs -o mode=0755 cm-head-run /run
mkdir /run/munge /run/nslcd
mount --move "$scratch" /run/munge
chown nslcd:nslcd /run/nslcd
nslcd -n &
tries=0
until [ -S /run/nslcd/socket ] || [ "$tries" -ge 50 ]; do sleep 0.1; tries=$((tries + 1)); done
exec "$@"
"""


def unavailable() -> str:
    """Why a lab director cannot run here ("" when it can): slapd, rsync, ldapsearch."""
    why = available() or ""
    for tool in ("rsync", "ldapsearch"):
        if shutil.which(tool) is None:
            why = why or f"{tool} is not installed"
    return why


def make_head(workdir: Path, host: str) -> Slapd:
    """The head's slapd (a syncrepl provider) listening on `host` (the lab bridge's
    address, which the director's namespace reaches); not started."""
    seed = f"{directory_ldif()}\n{ALICE}\n{GROUPS}"
    return make_server(workdir, provider=True, seed_ldif=seed, host=host)


def head_launcher(workdir: Path, head: Slapd, home: Path) -> list[str]:
    """SlurmLab's launcher for a head whose users come from `head` (nslcd) and whose /home
    is `home`; its files under `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "nslcd.conf"
    conf.write_text(f"uid nslcd\ngid nslcd\nuri {head.uri}/\nbase {SUFFIX}\n")
    conf.chmod(0o600)
    switch = workdir / "nsswitch.conf"
    lines = Path("/etc/nsswitch.conf").read_text().splitlines()
    lines = [line for line in lines if not line.startswith(("passwd:", "group:"))]
    switch.write_text("\n".join(["passwd: files ldap", "group: files ldap", *lines]) + "\n")
    scratch = workdir / "munge"
    scratch.mkdir(exist_ok=True)
    unshare = ["unshare", "--mount", "--propagation", "private"]
    return [
        *unshare,
        "/bin/sh",
        "-c",
        HEAD_NSS,
        "head",
        str(conf),
        str(switch),
        str(home),
        str(scratch),
    ]


def make_image(
    workdir: Path, base_image: str, node_image: bool = False, ca_file: Path | None = None
) -> Path:
    """The tree (etc/motd and motd.link -> etc/motd) and its definition; the definitions
    directory. A `node_image` also has opt/site/bin/hello, and boots burst nodes with the
    shipped cloud-config: /home from the head, /opt/site from the director, users from the
    director's LDAP replica (its certificate checked against `ca_file`, put in the tree at
    opt/site/etc/ldap-ca.pem, when given)."""
    tree = workdir / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "motd").write_text(MOTD)
    (tree / "motd.link").symlink_to("etc/motd")
    defs = workdir / "images"
    defs.mkdir()
    toml = (
        f'name = "base"\ntree = "{tree}"\nuser_data = "base.tmpl"\n'
        f'[base.local]\nimage = "{base_image}"\n'
    )
    template = "#cloud-config\n# @{image} via @{director_address}\n"
    if node_image:
        hello = tree / "opt" / "site" / "bin" / "hello"
        hello.parent.mkdir(parents=True)
        hello.write_text(f'#!/bin/sh\necho "{HELLO} on $(hostname)"\n')
        hello.chmod(0o755)
        toml = toml.replace("[base.local]", f'director_path = "{IMAGE_PATH}"\n[base.local]')
        toml += (
            '[[nfs_mounts]]\nserver = "head"\nexport = "/home"\npath = "/home"\n'
            f'[[nfs_mounts]]\nserver = "director"\nexport = "{IMAGE_PATH}/opt/site"\n'
            'path = "/opt/site"\noptions = "ro,defaults,_netdev"\n'
            '[name_service]\nkind = "nslcd"\n'
        )
        if ca_file is not None:
            on_node = tree / "opt" / "site" / "etc" / "ldap-ca.pem"
            on_node.parent.mkdir(parents=True)
            shutil.copyfile(ca_file, on_node)
            on_node.chmod(0o644)
            toml += 'ca_file = "/opt/site/etc/ldap-ca.pem"\n'

        template = (default_images_dir() / "gpu-node.cloud-init.tmpl").read_text()
    (defs / "base.toml").write_text(toml)
    (defs / "base.tmpl").write_text(template)
    return defs


# the lab director's facts (providers/local/director.py), as directors/userdata.py renders
# them from [ldap] and [images], for a [[directors]] user_data_file that adds TLS
DIRECTOR_FACTS = """#clustermgr-director
suffix = "@{ldap_suffix}"
admin_dn = "@{ldap_admin_dn}"
password_file = "@{ldap_password_file}"
rsync_module = "@{rsync_module}"
push_module = "@{push_module}"
push_user = "@{push_user}"
push_secrets = "@{push_secrets}"
ldap_port = @{ldap_port}
attributes = "@{ldap_attributes}"
rsync_port = @{rsync_port}
"""


def director_tables(
    workdir: Path,
    head: Slapd,
    *,
    base_image: str,
    boot_timeout_s: float,
    node_image: bool = False,
    tls: TlsFiles | None = None,
) -> str:
    """[[directors]] for provider "local" (READY needs image base and the LDAP replica),
    [images] and [ldap] (syncrepl from `head`); the secrets in files under `workdir`."""
    secrets = {
        "head.secret": (head.admin_password + "\n").encode(),
        "director.secret": b"director-secret\n",
    }
    for name, content in secrets.items():
        (workdir / name).write_bytes(content)
        (workdir / name).chmod(0o600)
    defs = make_image(workdir, base_image, node_image, tls.ca_file if tls else None)
    director, replica_tls = "", 'tls = "none"'
    if tls is not None:  # the director's slapd offers StartTLS with a certificate of the CA
        template = workdir / "director.tmpl"
        template.write_text(DIRECTOR_FACTS + (
            f'tls_cert_file = "{tls.cert_file}"\ntls_key_file = "{tls.key_file}"\n'
        ))  # fmt: skip
        director = f'user_data_file = "{template}"'
        replica_tls = f'tls = "starttls"\nca_file = "{tls.ca_file}"'
    return f"""
[[directors]]
provider = "local"
instance_type = "local.cpu"
image = "local"
health_ports = [389, 873]
boot_timeout_s = {boot_timeout_s}
health_interval_s = 2
images = ["base"]
ldap = true
{director}

[images]
definitions_dir = "{defs}"

[ldap]
suffix = "{SUFFIX}"
bases = ["ou=people,{SUFFIX}", "ou=groups,{SUFFIX}"]
syncrepl_retry = "1 +"

[ldap.head]
uri = "{head.uri}"
bind_dn = "{head.admin_dn}"
credentials = {{ source = "password_file", secret_file = "{workdir / "head.secret"}" }}
tls = "none"  # the lab's loopback slapd has no certificate

[ldap.replica]
admin_dn = "cn=admin,cn=config"
credentials = {{ source = "password_file", secret_file = "{workdir / "director.secret"}" }}
{replica_tls}
"""

"""A local region's director for the tests: the head's LDAP holding `alice` (a user only the
head has), an image `base` (a file and a symlink), and the config tables that declare a
lab director for provider "local" replicating both (`director_tables`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.services.slapd import SUFFIX, Slapd, available, directory_ldif, make_server

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
MOTD = "served by the director\n"


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
    return make_server(workdir, provider=True, seed_ldif=directory_ldif() + "\n" + ALICE, host=host)


def make_image(workdir: Path, base_image: str) -> Path:
    """The tree (etc/motd and motd.link -> etc/motd) and its definition; the definitions
    directory."""
    tree = workdir / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "motd").write_text(MOTD)
    (tree / "motd.link").symlink_to("etc/motd")
    defs = workdir / "images"
    defs.mkdir()
    (defs / "base.toml").write_text(
        f'name = "base"\ntree = "{tree}"\nuser_data = "base.tmpl"\n'
        f'[base.local]\nimage = "{base_image}"\n'
    )
    (defs / "base.tmpl").write_text("#cloud-config\n# @{image} via @{director_address}\n")
    return defs


def director_tables(workdir: Path, head: Slapd, *, base_image: str, boot_timeout_s: float) -> str:
    """[[directors]] for provider "local" (READY needs image base and the LDAP replica),
    [images] and [ldap] (syncrepl from `head`); the secrets in files under `workdir`."""
    secrets = {
        "head.secret": (head.admin_password + "\n").encode(),
        "director.secret": b"director-secret\n",
    }
    for name, content in secrets.items():
        (workdir / name).write_bytes(content)
        (workdir / name).chmod(0o600)
    defs = make_image(workdir, base_image)
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
tls = "none"
"""

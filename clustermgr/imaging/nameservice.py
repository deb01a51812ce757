"""A burst node's users and groups from its region's director (`[name_service]` of an image
definition): nslcd and libnss-ldapd in the machine image, pointed at the director's LDAP
replica with the TLS the replica offers (`[ldap.replica] tls`; StartTLS unless a site set
"none"), the certificate checked against a CA file on the node (`tls_reqcert demand`).

Anonymous reads, as the replica serves users and groups to any node of its subnet: no bind
password travels in user-data. The boot step writes /etc/nslcd.conf, adds `ldap` to the
passwd and group lines of /etc/nsswitch.conf and restarts nslcd, before slurmd starts, so
the first job of a head-only user already resolves.
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from clustermgr.config import Settings
from clustermgr.core.errors import ConfigError
from clustermgr.nodes.bootstrap import AtTemplate

NAMESERVICE_TEMPLATE = "nameservice.sh.tmpl"
NODE_PATH_PATTERN = r"^/[A-Za-z0-9._/+-]*$"
# what may reach nslcd.conf: a DN or a host, nothing that ends a line or quotes
SAFE_VALUE = re.compile(r"[A-Za-z0-9=,. :_\[\]-]+")
SSL_OF_TLS = {"starttls": "start_tls", "ldaps": "on", "none": "off"}


class NameService(BaseModel):
    """`[name_service]` of an image definition."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["nslcd"] = "nslcd"
    # the CA bundle on the node that holds the CA of the director's LDAP certificate
    ca_file: str = Field("/etc/ssl/certs/ca-certificates.crt", pattern=NODE_PATH_PATTERN)


@dataclass(frozen=True)
class DirectoryFacts:
    """Where a node reads users and groups: the director's replica, as [ldap] says."""

    suffix: str
    port: int
    tls: str  # [ldap.replica] tls: starttls, ldaps, none


def directory_facts(settings: Settings) -> DirectoryFacts | None:
    if settings.ldap is None:
        return None
    replica = settings.ldap.replica
    return DirectoryFacts(settings.ldap.suffix, replica.port, replica.tls)


def render_nameservice_script(
    service: NameService | None, directory: DirectoryFacts | None, director_address: str
) -> str:
    """The boot step that points the node's name service at the director; with no
    [name_service] it does nothing."""
    values = {"uri": "", "base": "", "ssl": "", "ca_file": ""}
    if service is not None:
        if directory is None:
            raise ConfigError(
                "name_service: the image reads users from its director's LDAP replica, and "
                "the configuration has no [ldap]: add [ldap], or drop [name_service]"
            )
        for what, value in (("director address", director_address), ("suffix", directory.suffix)):
            if not SAFE_VALUE.fullmatch(value):
                raise ConfigError(f"name_service: the {what} {value!r} cannot go in nslcd.conf")
        scheme = "ldaps" if directory.tls == "ldaps" else "ldap"
        host = f"[{director_address}]" if ":" in director_address else director_address
        values = {
            "uri": f"{scheme}://{host}:{directory.port}/",
            "base": directory.suffix,
            "ssl": SSL_OF_TLS[directory.tls],
            "ca_file": service.ca_file,
        }
    text = importlib.resources.files("clustermgr.images").joinpath(NAMESERVICE_TEMPLATE)
    return AtTemplate(text.read_text()).substitute(values)

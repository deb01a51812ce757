"""The control plane's configuration files, written into its directory (mode 0600: they hold
the service password and database URLs).

One service user (`svc`, admin in the `service` project) authenticates every service to the
others; the settings that make this plane small and deterministic are commented where set.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

NEUTRON_TEST_PASTE = "/usr/lib/python3/dist-packages/neutron/tests/etc/api-paste.ini"
# nova-compute's host name: ML2's test mechanism driver binds ports for this host (as an OVS
# port without port filtering), with no L2 agent anywhere (neutron/tests/unit/plugins/ml2/
# drivers/mechanism_test.py, TestMechanismDriver.bind_port)
COMPUTE_HOST = "host-ovs-no_filter"
PHYSNET = "physnet1"

Sections = Mapping[str, Mapping[str, str | int | float | bool]]


@dataclass(frozen=True)
class Ports:
    """Each API's loopback port (free ports, taken at start)."""

    @property
    def auth_url(self) -> str:
        return f"http://127.0.0.1:{self.keystone}/v3"

    keystone: int
    placement: int
    glance: int
    nova: int
    neutron: int
    extra: Mapping[str, int] = field(default_factory=dict)  # services started later, by name


@dataclass(frozen=True)
class Settings:
    workdir: Path
    ports: Ports
    service_password: str
    transport_url: str
    db_url: Mapping[str, str]  # database name -> SQLAlchemy URL


def write_ini(path: Path, sections: Sections) -> Path:
    parser = configparser.ConfigParser(interpolation=None)
    for name, values in sections.items():
        parser[name] = {key: _ini(value) for key, value in values.items()}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        parser.write(out)
    return path


def _ini(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def service_auth(s: Settings) -> dict[str, str]:
    """The keystoneauth options of the service user, for every [section] that calls out."""
    return {
        "auth_url": s.ports.auth_url,
        "auth_type": "password",
        "project_domain_name": "Default",
        "user_domain_name": "Default",
        "project_name": "service",
        "username": "svc",
        "password": s.service_password,
        "region_name": "RegionOne",
    }


def authtoken(s: Settings) -> dict[str, str]:
    # the catalog has public endpoints only
    return {**service_auth(s), "www_authenticate_uri": s.ports.auth_url, "interface": "public"}


def common(s: Settings) -> dict[str, str | bool]:
    return {"debug": False, "use_stderr": True, "state_path": str(s.workdir / "state")}


def keystone(s: Settings) -> Path:
    return write_ini(
        s.workdir / "keystone.conf",
        {
            "DEFAULT": common(s),
            "database": {"connection": s.db_url["keystone"]},
            "token": {"provider": "fernet"},
            "fernet_tokens": {"key_repository": str(s.workdir / "fernet-keys")},
            "fernet_receipts": {"key_repository": str(s.workdir / "fernet-keys")},
            "credential": {"key_repository": str(s.workdir / "credential-keys")},
        },
    )


def placement(s: Settings) -> Path:
    confdir = s.workdir / "placement"
    confdir.mkdir(mode=0o700, exist_ok=True)
    return write_ini(
        confdir / "placement.conf",
        {
            "DEFAULT": common(s),
            "placement_database": {"connection": s.db_url["placement"]},
            "api": {"auth_strategy": "keystone"},
            "keystone_authtoken": authtoken(s),
        },
    )


GLANCE_PASTE = """\
[pipeline:glance-api-keystone]
pipeline = versionnegotiation authtoken context rootapp

[composite:rootapp]
paste.composite_factory = glance.api:root_app_factory
/: apiversions
/v2: apiv2app

[app:apiversions]
paste.app_factory = glance.api.versions:create_resource

[app:apiv2app]
paste.app_factory = glance.api.v2.router:API.factory

[filter:versionnegotiation]
paste.filter_factory = glance.api.middleware.version_negotiation:VersionNegotiationFilter.factory

[filter:context]
paste.filter_factory = glance.api.middleware.context:ContextMiddleware.factory

[filter:authtoken]
paste.filter_factory = keystonemiddleware.auth_token:filter_factory
delay_auth_decision = true
"""


def glance(s: Settings, name: str = "glance") -> Path:
    """glance-api's configuration; `name` another Glance's (its own files, database
    `s.db_url[name]`, store directory and port: the image-only second region)."""
    paste = s.workdir / f"{name}-api-paste.ini"
    paste.write_text(GLANCE_PASTE)
    store = s.workdir / ("images" if name == "glance" else f"{name}-images")
    store.mkdir(mode=0o700, exist_ok=True)
    return write_ini(
        s.workdir / f"{name}-api.conf",
        {
            "DEFAULT": {
                **common(s),
                "bind_host": "127.0.0.1",
                "bind_port": s.ports.glance if name == "glance" else s.ports.extra[name],
                "workers": 0,  # one process: the API in the process we started
            },
            "database": {"connection": s.db_url[name]},
            "keystone_authtoken": authtoken(s),
            "paste_deploy": {"flavor": "keystone", "config_file": str(paste)},
            "glance_store": {
                "stores": "file",
                "default_store": "file",
                "filesystem_store_datadir": str(store),
            },
            "oslo_concurrency": {"lock_path": str(s.workdir / "locks")},
        },
    )


NOVA_PASTE = """\
[composite:osapi_compute]
use = call:nova.api.openstack.urlmap:urlmap_factory
/: oscomputeversions
/v2.1: openstack_compute_api_v21

[composite:openstack_compute_api_v21]
use = call:nova.api.auth:pipeline_factory_v21
keystone = compute_req_id faultwrap sizelimit authtoken keystonecontext osapi_compute_app_v21

[filter:compute_req_id]
paste.filter_factory = nova.api.compute_req_id:ComputeReqIdMiddleware.factory

[filter:faultwrap]
paste.filter_factory = nova.api.openstack:FaultWrapper.factory

[filter:sizelimit]
paste.filter_factory = oslo_middleware:RequestBodySizeLimiter.factory

[filter:keystonecontext]
paste.filter_factory = nova.api.auth:NovaKeystoneContext.factory

[filter:authtoken]
paste.filter_factory = keystonemiddleware.auth_token:filter_factory

[app:osapi_compute_app_v21]
paste.app_factory = nova.api.openstack.compute:APIRouterV21.factory

[pipeline:oscomputeversions]
pipeline = faultwrap oscomputeversionapp

[app:oscomputeversionapp]
paste.app_factory = nova.api.openstack.compute.versions:Versions.factory
"""


def nova(s: Settings) -> tuple[Path, Path]:
    """nova.conf for every nova service, and compute.conf laid over it for nova-compute."""
    paste = s.workdir / "nova-api-paste.ini"
    paste.write_text(NOVA_PASTE)
    main = write_ini(
        s.workdir / "nova.conf",
        {
            "DEFAULT": {
                **common(s),
                "transport_url": s.transport_url,
                "enabled_apis": "osapi_compute",
                "osapi_compute_listen": "127.0.0.1",
                "osapi_compute_listen_port": s.ports.nova,
                "osapi_compute_workers": 1,
                # SmallFakeDriver: 2 vCPU / 8 GiB, nothing reserved, vCPUs overcommitted 2:1
                # and memory not at all, so four 1-vCPU 2-GiB servers fit (a 3-node job, one
                # multi-create) and the fifth finds no host (a real NoValidHost)
                "compute_driver": "fake.SmallFakeDriver",
                "cpu_allocation_ratio": 2.0,
                "ram_allocation_ratio": 1.0,
                "disk_allocation_ratio": 1.0,
                "initial_cpu_allocation_ratio": 2.0,
                "initial_ram_allocation_ratio": 1.0,
                "initial_disk_allocation_ratio": 1.0,
                "reserved_host_memory_mb": 0,
                "reserved_host_cpus": 0,
                "reserved_host_disk_mb": 0,
                # no L2 agent sends network-vif-plugged: do not wait for it
                "vif_plugging_is_fatal": False,
                "vif_plugging_timeout": 0,
                "heal_instance_info_cache_interval": -1,
            },
            "api": {"auth_strategy": "keystone"},
            "api_database": {"connection": s.db_url["nova_api"]},
            "database": {"connection": s.db_url["nova"]},
            "conductor": {"workers": 1},
            "scheduler": {"workers": 1, "discover_hosts_in_cells_interval": 2},
            "keystone_authtoken": authtoken(s),
            "placement": {**service_auth(s), "valid_interfaces": "public"},
            "neutron": {**service_auth(s), "valid_interfaces": "public"},
            "glance": {"region_name": "RegionOne", "valid_interfaces": "public"},
            "wsgi": {"api_paste_config": str(paste)},
            "oslo_concurrency": {"lock_path": str(s.workdir / "locks")},
            "oslo_messaging_notifications": {"driver": "noop"},
            "upgrade_levels": {"compute": "auto"},
        },
    )
    compute = write_ini(s.workdir / "nova-compute.conf", {"DEFAULT": {"host": COMPUTE_HOST}})
    return main, compute


def neutron(s: Settings) -> Path:
    return write_ini(
        s.workdir / "neutron.conf",
        {
            "DEFAULT": {
                **common(s),
                "core_plugin": "ml2",
                "service_plugins": "",
                "auth_strategy": "keystone",
                "transport_url": s.transport_url,
                "bind_host": "127.0.0.1",
                "bind_port": s.ports.neutron,
                "api_paste_config": NEUTRON_TEST_PASTE,
                "api_workers": 0,  # the API in the process we started
                "rpc_workers": 0,
                "rpc_state_report_workers": 0,
                "notify_nova_on_port_status_changes": False,
                "notify_nova_on_port_data_changes": False,
                "dhcp_agent_notification": False,
            },
            "database": {"connection": s.db_url["neutron"]},
            "keystone_authtoken": authtoken(s),
            # no L2 agent: ML2's test mechanism driver binds ports for COMPUTE_HOST, on a
            # flat provider network of PHYSNET
            "ml2": {
                "type_drivers": "flat",
                "tenant_network_types": "",
                "mechanism_drivers": "test",
                "extension_drivers": "port_security",
            },
            "ml2_type_flat": {"flat_networks": PHYSNET},
            "oslo_concurrency": {"lock_path": str(s.workdir / "locks")},
            "oslo_messaging_notifications": {"driver": "noop"},
        },
    )

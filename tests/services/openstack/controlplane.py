"""Bring up the whole control plane, and stop it, by pid.

`start()` returns a ControlPlane once nova-compute's host is in a cell and placement holds
its inventory, with the resources the tests use: flavors, a public image, a shared flat
network, a `burst` project and user (role member) for the provider, an admin for the tests.
Every process runs from Debian's /usr/bin/python3 and the OpenStack Zed packages.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.labs.slurmlab import free_port
from tests.services.openstack import configs, mariadb, procs, rabbitmq

SYSTEM_PYTHON = "/usr/bin/python3"
WSGI_RUNNER = Path(__file__).with_name("wsgi_runner.py")
PACKAGES = ("keystone", "placement", "glance", "nova", "neutron")
DATABASES = ("keystone", "placement", "glance", "nova_api", "nova", "nova_cell0", "neutron")
READY_TIMEOUT_S = 120.0
REGION = "RegionOne"
IMAGE_REGION = "RegionTwo"  # start_image_region: a Glance only
# what the tests launch: SmallFakeDriver's host (4 vCPUs at 2:1, 8 GiB) holds four g1.small;
# g1.quad (16 GiB) never fits
FLAVORS = {"g1.small": (1, 2048, 1), "g1.tiny": (1, 1024, 1), "g1.quad": (4, 16384, 1)}
IMAGE = "debian-fake"
NETWORK = "burst-net"
SUBNET_CIDR = "10.31.0.0/24"
BURST_PROJECT = "burst"


class PlaneUnavailable(Exception):
    """The control plane cannot run here; the message says what is missing."""


@dataclass
class ControlPlane:
    workdir: Path
    ports: configs.Ports
    admin_password: str
    burst_password: str
    services: list[procs.Service] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    settings: configs.Settings | None = None  # what the configuration files were made of
    database: mariadb.PrivateMariaDB | None = None

    @property
    def auth_url(self) -> str:
        return self.ports.auth_url

    def cloud(self, project: str, user: str, password: str) -> dict[str, Any]:
        """A clouds.yaml entry (openstacksdk's) for a user of this plane."""
        return {
            "auth": {
                "auth_url": self.auth_url,
                "username": user,
                "password": password,
                "project_name": project,
                "user_domain_name": "Default",
                "project_domain_name": "Default",
            },
            "region_name": REGION,
            "interface": "public",
            "identity_api_version": 3,
        }

    def admin(self) -> Any:
        import openstack

        return openstack.connect(
            **self.cloud("admin", "admin", self.admin_password)["auth"], region_name=REGION
        )

    def burst(self) -> Any:
        import openstack

        auth = self.cloud(BURST_PROJECT, BURST_PROJECT, self.burst_password)["auth"]
        return openstack.connect(**auth, region_name=REGION)


def missing() -> str | None:
    """What this machine lacks to run the plane (None: nothing)."""
    needed = [SYSTEM_PYTHON, "/usr/sbin/mariadbd", str(rabbitmq.RABBIT_BIN / "rabbitmq-server")]
    for path in needed:
        if not os.access(path, os.X_OK):
            return f"{path} is missing (bash .ci/install-debs installs it)"
    for package in PACKAGES:
        if not Path(f"/usr/lib/python3/dist-packages/{package}").is_dir():
            return f"python3-{package} is not installed (bash .ci/install-debs installs it)"
    if os.geteuid() != 0:
        return "the control plane runs MariaDB and RabbitMQ as their own users: run as root"
    return None


def entry(name: str, module: str, args: list[str], optimize: bool = False) -> list[str]:
    """argv running a package's console script `name` (module:main) under Debian's python3."""
    code = f"import sys; sys.argv[0] = {name!r}; from {module} import main; sys.exit(main())"
    return [SYSTEM_PYTHON, *(["-O"] if optimize else []), "-c", code, *args]


@contextlib.contextmanager
def running() -> Iterator[ControlPlane]:
    plane = start()
    try:
        yield plane
    finally:
        stop(plane)


def start() -> ControlPlane:
    why = missing()
    if why:
        raise PlaneUnavailable(why)
    began = time.monotonic()
    # in memory where there is /dev/shm: the schema migrations write hundreds of tables
    scratch = "/dev/shm" if Path("/dev/shm").is_dir() else None
    workdir = Path(tempfile.mkdtemp(prefix="cm-nova-", dir=scratch))
    workdir.chmod(0o711)  # mysql and rabbitmq reach their own subdirectories
    for sub in ("state", "locks", "images"):
        (workdir / sub).mkdir(mode=0o700)
    ports = configs.Ports(free_port(), free_port(), free_port(), free_port(), free_port())
    plane = ControlPlane(workdir, ports, secrets.token_urlsafe(16), secrets.token_urlsafe(16))
    try:
        _bring_up(plane, began)
    except BaseException:
        stop(plane)
        raise
    return plane


def _bring_up(plane: ControlPlane, began: float) -> None:
    workdir = plane.workdir
    with ThreadPoolExecutor(2) as pool:
        rabbit_future = pool.submit(rabbitmq.start, workdir)
        db = mariadb.start(workdir)
        plane.services.append(db.service)
        mariadb.create_databases(db, list(DATABASES))
        rabbit = rabbit_future.result()
    plane.services.extend(rabbit.services())
    plane.timings["mariadb+rabbitmq"] = time.monotonic() - began
    settings = configs.Settings(
        workdir,
        plane.ports,
        secrets.token_urlsafe(16),
        rabbit.transport_url,
        {name: db.url(name) for name in DATABASES},
    )
    plane.settings, plane.database = settings, db
    files = _write_configs(settings)
    _sync_databases(plane, files, db)
    plane.timings["db sync"] = time.monotonic() - began
    _start_keystone(plane, files)
    _register(plane, settings.service_password)
    plane.timings["keystone"] = time.monotonic() - began
    _start_services(plane, files)
    _wait_for_compute(plane, files)
    plane.timings["compute ready"] = time.monotonic() - began
    _seed(plane)
    plane.timings["seeded"] = time.monotonic() - began


def _write_configs(s: configs.Settings) -> dict[str, Path]:
    nova_conf, compute_conf = configs.nova(s)
    return {
        "keystone": configs.keystone(s),
        "placement": configs.placement(s),
        "glance": configs.glance(s),
        "nova": nova_conf,
        "nova-compute": compute_conf,
        "neutron": configs.neutron(s),
    }


def _sync_databases(
    plane: ControlPlane, files: dict[str, Path], db: mariadb.PrivateMariaDB
) -> None:
    """Each service's schema (and keystone's keys, nova's cells), four chains at once."""

    def manage(service: str, module: str, *args: str, env: dict[str, str] | None = None) -> None:
        argv = entry(f"{service}-manage", module, ["--config-file", str(files[service]), *args])
        procs.run(argv, plane.workdir, f"{service}-manage {' '.join(args[:2])}", env)

    def keystone() -> None:
        owner = ("--keystone-user", "root", "--keystone-group", "root")
        with ThreadPoolExecutor(2) as keys:  # the keys need no database
            made = [
                keys.submit(manage, "keystone", "keystone.cmd.manage", what, *owner)
                for what in ("fernet_setup", "credential_setup")
            ]
            manage("keystone", "keystone.cmd.manage", "db_sync")
            for future in made:
                future.result()
        urls = ("--bootstrap-admin-url", plane.auth_url, "--bootstrap-public-url", plane.auth_url)
        secret = {"OS_BOOTSTRAP_PASSWORD": plane.admin_password}  # not in argv
        manage(
            "keystone",
            "keystone.cmd.manage",
            "bootstrap",
            *urls,
            "--bootstrap-region-id",
            REGION,
            env=secret,
        )

    def nova() -> None:
        manage("nova", "nova.cmd.manage", "api_db", "sync")
        cell0 = db.url("nova_cell0")
        manage("nova", "nova.cmd.manage", "cell_v2", "map_cell0", "--database_connection", cell0)
        manage("nova", "nova.cmd.manage", "cell_v2", "create_cell", "--name", "cell1")
        manage("nova", "nova.cmd.manage", "db", "sync")

    def placement_and_glance() -> None:
        manage("placement", "placement.cmd.manage", "db", "sync")
        manage("glance", "glance.cmd.manage", "db_sync")

    def neutron() -> None:
        manage("neutron", "neutron.db.migration.cli", "upgrade", "heads")

    with ThreadPoolExecutor(4) as pool:
        chains = [pool.submit(job) for job in (keystone, nova, neutron, placement_and_glance)]
        for future in chains:
            future.result()


def _wsgi(name: str, target: str, port: int, env: dict[str, str], plane: ControlPlane) -> None:
    service = procs.start(
        name, [SYSTEM_PYTHON, str(WSGI_RUNNER), target, str(port)], plane.workdir, env
    )
    plane.services.append(service)


def _start_keystone(plane: ControlPlane, files: dict[str, Path]) -> None:
    env = {"OS_KEYSTONE_CONFIG_FILES": str(files["keystone"])}
    _wsgi(
        "keystone",
        "keystone.server.wsgi:initialize_public_application",
        plane.ports.keystone,
        env,
        plane,
    )
    _wait_http(plane, plane.services[-1], plane.auth_url)


def _wait_http(plane: ControlPlane, service: procs.Service, url: str) -> None:
    import requests

    procs.wait_until(
        service,
        lambda: requests.get(url, timeout=5).status_code < 500,
        READY_TIMEOUT_S,
        f"answer on {url}",
    )


def _register(plane: ControlPlane, service_password: str) -> None:
    """Services and endpoints in keystone's catalog; the service user; the burst project."""
    admin = plane.admin()
    ident = admin.identity
    roles = {role.name: role for role in ident.roles()}
    port = plane.ports
    catalog = {
        "compute": ("nova", f"http://127.0.0.1:{port.nova}/v2.1"),
        "placement": ("placement", f"http://127.0.0.1:{port.placement}"),
        "image": ("glance", f"http://127.0.0.1:{port.glance}"),
        "network": ("neutron", f"http://127.0.0.1:{port.neutron}"),
    }
    for kind, (name, url) in catalog.items():
        service = ident.create_service(name=name, type=kind)
        ident.create_endpoint(service_id=service.id, interface="public", url=url, region_id=REGION)
    service_project = ident.create_project(name="service", domain_id="default")
    svc = ident.create_user(name="svc", password=service_password, domain_id="default")
    ident.assign_project_role_to_user(service_project, svc, roles["admin"])
    burst = ident.create_project(name=BURST_PROJECT, domain_id="default")
    user = ident.create_user(name=BURST_PROJECT, password=plane.burst_password, domain_id="default")
    ident.assign_project_role_to_user(burst, user, roles["member"])


def _start_services(plane: ControlPlane, files: dict[str, Path]) -> None:
    nova = ["--config-file", str(files["nova"])]
    port = plane.ports
    env = {"OS_PLACEMENT_CONFIG_DIR": str(files["placement"].parent)}
    _wsgi("placement", "placement.wsgi:init_application", port.placement, env, plane)
    started = {
        "glance-api": entry(
            "glance-api", "glance.cmd.api", ["--config-file", str(files["glance"])]
        ),
        # -O: the test mechanism driver's asserts check unit-test contexts, not a server's
        "neutron-server": entry(
            "neutron-server",
            "neutron.cmd.eventlet.server",
            ["--config-file", str(files["neutron"])],
            optimize=True,
        ),
        "nova-api": entry("nova-api", "nova.cmd.api", nova),
        "nova-conductor": entry("nova-conductor", "nova.cmd.conductor", nova),
        "nova-scheduler": entry("nova-scheduler", "nova.cmd.scheduler", nova),
        "nova-compute": entry(
            "nova-compute", "nova.cmd.compute", [*nova, "--config-file", str(files["nova-compute"])]
        ),
    }
    for name, argv in started.items():
        plane.services.append(procs.start(name, argv, plane.workdir))
    by_name = {s.name: s for s in plane.services}
    began = time.monotonic()
    for name, url in (
        ("placement", f"http://127.0.0.1:{port.placement}/"),
        ("glance-api", f"http://127.0.0.1:{port.glance}/"),
        ("neutron-server", f"http://127.0.0.1:{port.neutron}/"),
        ("nova-api", f"http://127.0.0.1:{port.nova}/"),
    ):
        _wait_http(plane, by_name[name], url)
        plane.timings[f"{name} answers"] = time.monotonic() - began


def _wait_for_compute(plane: ControlPlane, files: dict[str, Path]) -> None:
    """nova-compute's node recorded and its inventory in placement, then its host mapped to
    the cell (discover_hosts, as the scheduler also does every 2 s): only then can a server
    be scheduled. (The hypervisors' detail calls each compute by RPC: not used here.)"""
    admin = plane.admin()
    compute = next(s for s in plane.services if s.name == "nova-compute")

    def ready() -> bool:
        if not list(admin.compute.hypervisors(details=False)):
            return False
        providers = list(admin.placement.resource_providers())
        inventories = admin.placement.resource_provider_inventories(providers[0])
        return "VCPU" in {i.resource_class for i in inventories}

    procs.wait_until(compute, ready, READY_TIMEOUT_S, "compute node with inventory")
    discover = ["--config-file", str(files["nova"]), "cell_v2", "discover_hosts"]
    procs.run(entry("nova-manage", "nova.cmd.manage", discover), plane.workdir, "discover_hosts")


def _seed(plane: ControlPlane) -> None:
    admin = plane.admin()
    for name, (vcpus, ram, disk) in FLAVORS.items():
        admin.compute.create_flavor(name=name, vcpus=vcpus, ram=ram, disk=disk)
    admin.create_image(
        IMAGE,
        data=b"\0" * 4096,
        disk_format="raw",
        container_format="bare",
        visibility="public",
        wait=True,
    )
    network = admin.network.create_network(
        name=NETWORK,
        shared=True,
        provider_network_type="flat",
        provider_physical_network=configs.PHYSNET,
    )
    admin.network.create_subnet(
        network_id=network.id,
        ip_version=4,
        cidr=SUBNET_CIDR,
        name=f"{NETWORK}-v4",
        enable_dhcp=False,
    )


@dataclass(frozen=True)
class ImageRegion:
    """A second region that has only a Glance (its own glance-api, database and store),
    in keystone's catalog as that region's image endpoint."""

    region: str
    url: str
    service: procs.Service
    endpoint_id: str


def start_image_region(plane: ControlPlane, region: str = IMAGE_REGION) -> ImageRegion:
    """Another glance-api for `region` (a copy's source); `stop_image_region` undoes it."""
    import dataclasses

    assert plane.settings is not None and plane.database is not None
    name = "glance2"
    mariadb.create_databases(plane.database, [name])
    port = free_port()
    base = plane.settings
    settings = dataclasses.replace(
        base,
        ports=dataclasses.replace(base.ports, extra={name: port}),
        db_url={**base.db_url, name: plane.database.url(name)},
    )
    conf = configs.glance(settings, name)
    sync = entry("glance-manage", "glance.cmd.manage", ["--config-file", str(conf), "db_sync"])
    procs.run(sync, plane.workdir, f"{name}-manage db_sync")
    argv = entry("glance-api", "glance.cmd.api", ["--config-file", str(conf)])
    service = procs.start(f"{name}-api", argv, plane.workdir)
    plane.services.append(service)  # stop(plane) stops it too
    url = f"http://127.0.0.1:{port}"
    _wait_http(plane, service, url + "/")
    ident = plane.admin().identity
    if ident.find_region(region) is None:
        ident.create_region(id=region)
    image = next(s for s in ident.services() if s.type == "image")
    endpoint = ident.create_endpoint(
        service_id=image.id, interface="public", url=url, region_id=region
    )
    return ImageRegion(region, url, service, str(endpoint.id))


def stop_image_region(plane: ControlPlane, made: ImageRegion) -> None:
    ident = plane.admin().identity
    ident.delete_endpoint(made.endpoint_id, ignore_missing=True)
    ident.delete_region(made.region, ignore_missing=True)
    procs.stop(made.service)
    plane.services.remove(made.service)


def stop(plane: ControlPlane) -> None:
    """Every process in reverse order of start, by pid; then the directory goes."""
    for service in reversed(plane.services):
        procs.stop(service)
    if not os.environ.get("CM_KEEP_NOVA_DIR"):
        shutil.rmtree(plane.workdir, ignore_errors=True)

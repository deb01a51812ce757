"""A private RabbitMQ for the control plane: its own epmd and node on free loopback ports, its
own data, log and cookie under the plane's directory, run as Debian's `rabbitmq` user."""

from __future__ import annotations

import os
import pwd
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.labs.slurmlab import free_port
from tests.services.openstack import procs

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class PrivateRabbit:
    epmd: procs.Service
    server: procs.Service
    port: int

    @property
    def transport_url(self) -> str:
        return f"rabbit://guest:guest@127.0.0.1:{self.port}/"

    def services(self) -> list[procs.Service]:
        return [self.server, self.epmd]  # the order to stop them in


def start(workdir: Path) -> PrivateRabbit:
    home = workdir / "rabbitmq"
    home.mkdir(mode=0o700)
    owner = pwd.getpwnam("rabbitmq")
    os.chown(home, owner.pw_uid, owner.pw_gid)
    env_file = home / "rabbitmq-env.conf"  # not the machine's /etc/rabbitmq one
    env_file.write_text("")
    epmd_port, port, dist_port = free_port(), free_port(), free_port()
    epmd = procs.start(
        "epmd", ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"], workdir, user="rabbitmq"
    )
    try:
        procs.wait_until(epmd, procs.port_open(epmd_port), 20, "epmd port")
        env = {
            "HOME": str(home),
            "ERL_EPMD_PORT": str(epmd_port),
            "RABBITMQ_CONF_ENV_FILE": str(env_file),
            "RABBITMQ_NODENAME": f"cm{uuid.uuid4().hex[:8]}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": str(home / "mnesia"),
            "RABBITMQ_LOG_BASE": str(home / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(home / "rabbitmq"),
        }
        server = procs.start(
            "rabbitmq", [str(RABBIT_BIN / "rabbitmq-server")], workdir, env, user="rabbitmq"
        )
    except Exception:
        procs.stop(epmd)
        raise
    rabbit = PrivateRabbit(epmd, server, port)
    try:
        procs.wait_until(server, procs.port_open(port), START_TIMEOUT_S, "AMQP port")
    except Exception:
        for service in rabbit.services():
            procs.stop(service)
        raise
    return rabbit

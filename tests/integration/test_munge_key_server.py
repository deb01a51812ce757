"""cm-scale's munge key server over real TLS on loopback, asked by curl as a booting node's
root asks it (the pinned public key, the token from a file). Each 127.0.0.x is another
host: the server sees the address curl binds with --interface."""

from __future__ import annotations

import logging
import os
import pwd
import socket
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clustermgr.config import Settings
from clustermgr.db.database import Database
from clustermgr.db.models import Node
from clustermgr.mungekey import launch_key_fetch
from clustermgr.mungekey.identity import KEY_DIR
from clustermgr.mungekey.server import KeyServer
from clustermgr.nodes.bootstrap import BootstrapFacts, render_bootstrap

REQUEST = "req-mk-1"
NODES = {"gpu-1": "127.0.0.2", "gpu-2": "127.0.0.3"}
KEY = bytes(range(256)) * 4


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class World:
    settings: Settings
    server: KeyServer
    url: str
    pin: str
    token: str
    now: list[datetime]
    tmp: Path
    db: Database

    def ask(self, source: str, token: str | None = None, pin: str | None = None) -> tuple[int, str]:
        """curl's exit status and the HTTP status (000 when TLS failed)."""
        body = self.tmp / "body"
        body.unlink(missing_ok=True)
        token_file = self.tmp / "token"
        token_file.write_text(self.token if token is None else token)
        argv = ["curl", "-sS", "--insecure", "--pinnedpubkey", pin or self.pin]
        argv += ["--interface", source, "--max-time", "10", "-o", str(body), "-w", "%{http_code}"]
        argv += ["--data-binary", f"@{token_file}", self.url]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        return done.returncode, done.stdout.strip()

    def got_key(self) -> bool:
        body = self.tmp / "body"
        return body.exists() and body.read_bytes() == KEY


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    key = tmp_path / "munge.key"
    key.write_bytes(KEY)
    key.chmod(0o400)
    port = free_port()
    settings = Settings.model_validate(
        {
            "cluster": {"name": "mk", "head_address": "127.0.0.1:6817"},
            "slurm": {"munge_key_path": str(key), "munge_key_port": port},
            "daemon": {"state_dir": str(tmp_path / "state")},
        }
    )
    db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
    db.upgrade()
    now = [datetime(2026, 5, 1, 12, 0, tzinfo=UTC)]
    with db.session() as session:
        for name, address in NODES.items():
            session.add(
                Node(
                    name=name,
                    kind="cloud",
                    state="BOOTING",
                    request_id=REQUEST,
                    private_address=address,
                    launched_at=now[0],
                )
            )
    fetch = launch_key_fetch(settings, REQUEST, len(NODES), 600, now[0])
    server = KeyServer(settings, db, clock=lambda: now[0])
    server.start()
    try:
        yield World(settings, server, fetch.url, fetch.pin, fetch.token, now, tmp_path, db)
    finally:
        server.shutdown()
        server.server_close()


def test_each_instance_of_the_request_gets_the_key_once_from_its_own_address(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cm-scale.munge-key")
    assert world.url == f"https://127.0.0.1:{world.server.port}/munge-key"
    assert world.ask("127.0.0.2") == (0, "200") and world.got_key()
    assert world.ask("127.0.0.2")[1] == "403" and not world.got_key()  # replayed
    assert world.ask("127.0.0.4")[1] == "403" and not world.got_key()  # not an instance
    assert world.ask("127.0.0.3") == (0, "200") and world.got_key()
    assert world.ask("127.0.0.3", token="guessed")[1] == "403"
    assert world.ask("127.0.0.3", token="")[1] == "400"
    said = caplog.text
    assert "munge key handed to 127.0.0.2 (request req-mk-1)" in said
    assert "munge key refused to 127.0.0.2 (request req-mk-1): already redeemed" in said
    assert "refused to 127.0.0.4: not the address of a burst node cm-scale launched" in said
    assert "refused to 127.0.0.3 (request req-mk-1): not the token of the node's launch" in said
    assert world.token not in said


def test_the_standby_taking_over_knows_what_the_leader_handed_out(world: World) -> None:
    """The other head (its own state dir, the same munge key and database) serves after a
    takeover: the token the leader's launch rendered is good there, once per address."""
    assert world.ask("127.0.0.2") == (0, "200")
    world.server.shutdown()  # the leader is gone; the standby serves on the same port
    world.server.server_close()
    daemon = world.settings.daemon.model_copy(update={"state_dir": world.tmp / "standby"})
    standby_settings = world.settings.model_copy(update={"daemon": daemon})
    standby = KeyServer(standby_settings, world.db, clock=lambda: world.now[0])
    standby.start()
    try:
        taken_over = World(
            standby_settings,
            standby,
            world.url,
            world.pin,
            world.token,
            world.now,
            world.tmp,
            world.db,
        )
        assert taken_over.ask("127.0.0.2")[1] == "403"  # redeemed from the leader already
        assert taken_over.ask("127.0.0.3") == (0, "200") and taken_over.got_key()
    finally:
        standby.shutdown()
        standby.server_close()


def test_past_the_boot_window_the_token_is_refused(world: World) -> None:
    world.now[0] += timedelta(seconds=601)
    assert world.ask("127.0.0.2")[1] == "403" and not world.got_key()


def test_a_node_refuses_a_server_whose_key_is_not_the_pinned_one(world: World) -> None:
    impostor_pin = "sha256//" + "A" * 43 + "="
    code, http = world.ask("127.0.0.2", pin=impostor_pin)
    assert (code, http) == (90, "000")  # CURLE_SSL_PINNEDPUBKEYNOTMATCH: nothing sent
    assert world.ask("127.0.0.2") == (0, "200")  # the token was not spent on the impostor


def test_only_root_reads_the_server_key_and_no_token_is_kept(
    world: World,
) -> None:
    directory = world.settings.daemon.state_dir / KEY_DIR
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in directory.iterdir():
        info = path.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode) & 0o077) == (os.getuid(), 0), path
        assert world.token.encode() not in path.read_bytes(), path


def test_the_boot_script_fetches_the_key_as_root_before_slurmd_starts(world: World) -> None:
    """images/bootstrap.sh.tmpl as a cloud node runs it (its own UTS namespace, so its
    `hostname` renames no one), from 127.0.0.1: an instance of its own request."""
    with world.db.session() as session:
        session.add(
            Node(
                name="gpu-3",
                kind="cloud",
                state="BOOTING",
                request_id="req-mk-2",
                private_address="127.0.0.1",
                launched_at=world.now[0],
            )
        )
    fetch = launch_key_fetch(world.settings, "req-mk-2", 1, 600, world.now[0])
    node_key = world.tmp / "node" / "munge" / "munge.key"
    slurmd = world.tmp / "slurmd"
    slurmd.write_text(f'#!/bin/sh\n[ "$1" = -V ] && exit 0\nls -ln {node_key}\necho JOINED\n')
    slurmd.chmod(0o755)
    facts = BootstrapFacts(
        cluster="mk",
        conf_server="127.0.0.1:6817",
        provider_type="local",
        munge_key=str(node_key),
        slurmd=str(slurmd),
        key_url=fetch.url,
        key_pin=fetch.pin,
        key_token=fetch.token,
    )
    script = world.tmp / "user-data.sh"
    script.write_text(render_bootstrap(facts))
    done = subprocess.run(
        ["unshare", "--uts", "/bin/sh", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CLUSTERMGR_NODE": "gpu-3"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("JOINED")
    assert node_key.read_bytes() == KEY
    info = node_key.stat()
    munge = pwd.getpwnam("munge")
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o400, munge.pw_uid)
    assert stat.S_IMODE(node_key.parent.stat().st_mode) == 0o700


def test_a_flood_of_idle_connections_is_capped_and_booting_nodes_still_get_in(
    world: World,
) -> None:
    from clustermgr.mungekey.server import MAX_CONNECTIONS

    idle = [
        socket.create_connection(("127.0.0.1", world.server.port)) for _ in range(MAX_CONNECTIONS)
    ]
    try:
        extra = socket.create_connection(("127.0.0.1", world.server.port))
        extra.settimeout(5)
        assert extra.recv(1) == b""  # closed at once, unanswered: no thread for it
        extra.close()
    finally:
        for conn in idle:
            conn.close()
    deadline = datetime.now(UTC) + timedelta(seconds=15)
    while world.ask("127.0.0.2")[1] == "000" and datetime.now(UTC) < deadline:
        pass  # the idle connections' threads end as the server sees them closed
    assert world.got_key()

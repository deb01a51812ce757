"""Directors end to end without Slurm: the local provider's lab director (a real slapd and
rsync daemon in a network namespace) launched by the lifecycle's pass, its image synced and
verified and its LDAP replica filled by syncrepl from a head slapd, READY; a user that only
the head holds resolves through the director from another namespace on the bridge (as a
burst node would), and a file and a symlink of the image tree are served as on the head.
Then the director's processes are killed: LOST, a replacement launched, synced and READY,
and the gate holds every burst-node launch of the region meanwhile.

The passes are the daemon's own: `director_pass` (cm-scale's pass after each cycle) with a
`DirectorSync` that queues, then `run_queued` (what the `director-sync` job runs)."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clustermgr.config import Settings, load_settings
from clustermgr.db.database import Database
from clustermgr.db.models import Director, Provider
from clustermgr.directors.gate import read_gate
from clustermgr.directors.states import director_name, find
from clustermgr.providers.base import Provider as CloudProvider
from clustermgr.providers.local import net
from clustermgr.providers.local.client import state_dir_of
from clustermgr.providers.local.state import locked
from clustermgr.providers.registry import make_provider
from clustermgr.runtime.director_sync import DirectorSync, director_pass
from tests.conftest import run_cli
from tests.fakes.local_harness import skip_unless_possible
from tests.labs.directorlab import MOTD, director_tables, make_head
from tests.services.slapd import SUFFIX, Slapd, SlapdUnavailable

pytestmark = pytest.mark.integration

SUBNET = net.Subnet.parse("10.213.211.0/24")
CLUSTER = "dirtest"
NAME = director_name("local", "here")
TEMPLATE = "local-cpu"


@dataclass
class World:
    settings: Settings
    config: Path
    db: Database
    provider: CloudProvider
    syncer: DirectorSync
    client_ns: Path  # a namespace on the bridge standing in for a burst node

    def run(self, demand: bool = True) -> Director:
        """One pass as cm-scale runs it after a cycle, then the director-sync job."""
        director_pass(
            self.settings,
            self.db,
            lambda name: self.provider,
            [self.syncer],
            {"local"} if demand else set(),
            "test",
        )
        self.syncer.run_queued()
        return self.row()

    def row(self) -> Director:
        with self.db.session() as session:
            row = find(session, NAME)
            assert row is not None
            session.expunge(row)
            return row

    def waiting(self) -> str | None:
        with self.db.session() as session:
            return read_gate(session, self.settings).waiting.get(TEMPLATE)

    def until_ready(self, timeout_s: float = 25) -> tuple[Director, list[str]]:
        """Passes until READY; the gate's answer for the region's template at each."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            row = self.run()
            if row.state == "ready":
                return row, seen
            seen.append(self.waiting() or "open")
            time.sleep(0.3)
        raise AssertionError(f"not READY in {timeout_s} s: {row.state} ({row.health})")

    def in_client(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [net.tool("nsenter") or "nsenter", f"--net={self.client_ns}", *argv],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )

    def fetch(self, url: str, dest: Path) -> str:
        """A file from the director's rsync daemon, read from the client namespace."""
        dest.unlink(missing_ok=True)
        done = self.in_client("rsync", url, str(dest))
        assert done.returncode == 0, done.stderr
        return dest.read_text()

    def cli(self, *args: str) -> Any:
        done = run_cli("--config", str(self.config), *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def write_config(tmp_path: Path, head: Slapd, bridge: str) -> Path:
    tables = director_tables(tmp_path, head, base_image="local.cpu", boot_timeout_s=30)
    config = tmp_path / "clustermgr.toml"
    config.write_text(f"""
[cluster]
name = "{CLUSTER}"
head_address = "{bridge}:6817"

[database]
url = "sqlite:///{tmp_path / "cm.db"}"

[[providers]]
name = "local"
type = "local"
region = "here"
subnet = "{SUBNET.network}"
state_dir = "{tmp_path / "local"}"

[[templates]]
name = "{TEMPLATE}"
provider = "local"
partition = "cloud"
nodes = "dn-[1-2]"
instance_types = ["local.cpu"]
image = "local"
cpus = 2
memory_mb = 1000

[daemon]
state_dir = "{tmp_path / "state"}"
orphan_grace_s = 0
{tables}""")
    return config


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    skip_unless_possible()
    for tool in ("slapd", "slaptest", "rsync", "ldapsearch"):
        if not net.tool(tool):
            pytest.skip(f"{tool} is not installed")
    bridge = net.ensure_bridge_for(SUBNET)
    client_id = f"tc-{secrets.token_hex(4)}"  # not lc-: the provider's sweep leaves it be
    provider: CloudProvider | None = None
    head = None
    try:
        net.create_network(client_id, SUBNET, SUBNET.instance_addresses()[-1])
        try:
            # on the bridge: the director's syncrepl consumer reaches it from its namespace
            head = make_head(tmp_path / "head", bridge)
            head.start()
        except SlapdUnavailable as exc:
            pytest.skip(str(exc))
        config = write_config(tmp_path, head, bridge)
        settings = load_settings(config)
        db = Database(f"sqlite:///{tmp_path / 'cm.db'}")
        db.upgrade()
        with db.session() as session:  # what `clustermgr nodes sync` records
            session.add(
                Provider(name="local", type="local", region="here", credentials_source="none")
            )
        provider = make_provider(settings.provider("local"), CLUSTER)
        syncer = DirectorSync(settings, db)  # queued, as in the daemon
        yield World(
            settings, config, db, provider, syncer, net.NETNS_DIR / net.netns_name(client_id)
        )
        db.dispose()
    finally:
        if provider is not None:
            left = list(provider.list_instances())
            if left:
                provider.terminate(left, "test-teardown")
        if head is not None:
            head.destroy()
        net.delete_network(client_id)
        net.remove_bridge_for(SUBNET)


def kill_director(world: World, instance_id: str) -> None:
    """Kill the director's processes, as a crashed VM (the record stays: the cloud lists
    the instance in error)."""
    with locked(state_dir_of(world.settings.provider("local")), exclusive=False) as state:
        rec = state.instances[instance_id]
    net.stop_instances({instance_id: (rec.pid or 0, rec.pid_start)})


def check_serving(world: World, address: str, fetched: Path) -> None:
    found = world.in_client(
        "ldapsearch",
        "-x",
        "-LLL",
        "-H",
        f"ldap://{address}",
        "-b",
        SUFFIX,
        "uid=alice",
        "uidNumber",
    )
    assert f"dn: uid=alice,ou=people,{SUFFIX}" in found.stdout, found.stderr
    assert "uidNumber: 20001" in found.stdout
    module = world.settings.images.rsync_module
    link = fetched / f"motd.link-{address}"
    link.unlink(missing_ok=True)
    copied = world.in_client("rsync", "-l", f"rsync://{address}/{module}/base/motd.link", str(link))
    assert link.readlink() == Path("etc/motd"), copied.stderr  # served as a symlink, intact
    motd = world.fetch(f"rsync://{address}/{module}/base/etc/motd", fetched / "motd")
    assert motd == MOTD
    modules = world.in_client("rsync", f"rsync://{address}/")
    assert modules.returncode == 0, modules.stderr
    # the images module only: a director holds and serves no munge key
    assert [line.split()[0] for line in modules.stdout.splitlines() if line.strip()] == [module]


def test_a_local_director_is_launched_synced_ready_and_replaced(
    world: World, tmp_path: Path
) -> None:
    assert world.waiting() == f"(Code:DIRECTOR) waiting for director {NAME} (stopped)"
    started = time.monotonic()
    ready, gate = world.until_ready()
    assert gate and all(w.startswith("(Code:DIRECTOR) waiting for director") for w in gate)
    assert world.waiting() is None  # READY: the region's burst nodes may launch
    address = ready.private_address or ""
    assert address and ready.instance_id
    check_serving(world, address, tmp_path)
    workdir = state_dir_of(world.settings.provider("local")) / "directors" / ready.instance_id
    assert (workdir / "image" / "base" / "motd.link").readlink() == Path("etc/motd")

    [listed] = world.cli("directors", "list", "--json")
    assert (listed["state"], listed["ldap_state"]) == ("ready", "ok")
    assert "verified" in listed["image_state"]
    [image] = world.cli("images", "status", "--json")
    assert (image["director"], image["state"], image["revision"]) == (
        NAME,
        "verified",
        image["latest"],
    )
    [ldap] = world.cli("ldap", "status", "--json")
    assert (ldap["director"], ldap["mode"], ldap["state"]) == (NAME, "syncrepl", "ok")

    kill_director(world, ready.instance_id)
    replaced = world.run()
    assert replaced.instance_id != ready.instance_id and replaced.state in ("booting", "syncing")
    with world.db.session() as session:
        row = find(session, NAME)
        assert row is not None
        moves = [(e.old_state, e.new_state) for e in row.events][-3:]
    assert moves[0] == ("ready", "lost") and ("lost", "launching") in moves
    assert not workdir.exists()  # the lost instance's files went with it
    assert world.waiting() is not None  # no burst node while it is not READY
    again, gate = world.until_ready()
    assert all(w.startswith(f"(Code:DIRECTOR) waiting for director {NAME}") for w in gate)
    assert again.instance_id == replaced.instance_id and world.waiting() is None
    check_serving(world, again.private_address or "", tmp_path)
    [image] = world.cli("images", "status", "--json")
    assert image["state"] == "verified"
    assert time.monotonic() - started < 60

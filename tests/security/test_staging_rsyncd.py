"""Hostile staging through a director's rsync daemon: `cmsec-mallory` against `cmsec-alice`'s
area in the per-user staging module (`[clustermgr-staging]`, written by the lab director's
code: `<root>/<user>`, chrooted, as the user, `auth users = root:deny, *`, the secrets file
the staging service keeps).

The daemon is a real `rsync --daemon` (root, loopback) standing in for the region's
director, READY in the database at 127.0.0.1; the staging service is cm-scale's, started
here as root; Slurm is the stand-in of test_staging.py. Every transfer runs as the user.
A transfer whose director is not READY waits for it (its region is the lifecycle's demand).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pwd
import shutil
import socket
import sqlite3
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.db.models import Provider
from clustermgr.directors.states import DirectorState, ensure
from clustermgr.staging import rsyncd_auth
from clustermgr.staging.director import staging_demand
from clustermgr.staging.service import StagingService
from tests.labs.rsyncd import RsyncDaemon
from tests.labs.slurmlab import _acquire_munge, _release_munge
from tests.security.conftest import Account, Accounts, as_user
from tests.security.test_staging import (
    BIN,
    StageLab,
    make_tree,
    prepare,
    run_job,
    serving,
    sha256_tree,
    submit,
    transfer_ids,
)

MODULE = "clustermgr-staging"
# rsync as the transfer jobs start it, logging each argv (and whether RSYNC_PASSWORD was
# set, never its value) before it runs the real one: the edge of the world, watched
RSYNC_WATCH = """#!/bin/sh
printf '%s\\n' "$(id -u) env=${{RSYNC_PASSWORD:+set}} $*" >> {log}
exec {rsync} "$@"
"""


@dataclass
class DaemonLab:
    stage: StageLab
    daemon: RsyncDaemon
    secrets: Path
    key: bytes  # the staging key (derived from the machine's munge key)
    argv_log: Path

    def url(self, user: str, path: str = "") -> str:
        return f"rsync://{user}@127.0.0.1:{self.daemon.port}/{MODULE}/{path}"

    def rsync(self, who: Account, *argv: str, password: str | None) -> tuple[int, str, list[str]]:
        """Raw rsync as `who` (her own tool, not ours): exit, stderr, what arrived."""
        env = {**self.stage.env, "PATH": os.environ["PATH"]}
        if password is not None:
            env["RSYNC_PASSWORD"] = password
        done = as_user(who.name, ["rsync", "--contimeout=10", *argv], env=env)
        return done.returncode, done.stderr, done.stdout.splitlines()


def _config(root: Path, port: int, director_root: Path, secrets: Path) -> Path:
    config = root / "clustermgr.toml"
    config.write_text(
        f'[database]\nurl = "sqlite:///{root}/state/cm.db"\n'
        f'[daemon]\nstate_dir = "{root}/state"\n'
        f'[slurm]\nbin_dir = "{root}/slurm-bin"\n'
        '[[providers]]\nname = "lab"\ntype = "local"\nregion = "lab"\n'
        '[staging]\ndata_mover_partition = "movers"\nquota_bytes = 100000000\n'
        f'transfer_command = "{BIN / "cmsub-transfer"}"\nsocket = "{root}/run/cmsub.sock"\n'
        "director_poll_s = 0.2\n"
        '[[staging.regions]]\nprovider = "lab"\npartition = "cloud"\n'
        f'rsync_target = "rsync://{{director}}:{port}/{MODULE}"\n'
        f'node_root = "{director_root}"\nrsyncd_secrets = "{secrets}"\n'
    )
    config.chmod(0o644)
    return config


@pytest.fixture
def dlab(accounts: Accounts, caplog: pytest.LogCaptureFixture) -> Iterator[DaemonLab]:
    caplog.set_level(logging.DEBUG)  # everything the service logs, for the password checks
    root = Path(tempfile.mkdtemp(prefix="cmsec-rsyncd-"))
    root.chmod(0o755)
    try:
        bin_dir = prepare(root)
        watch = root / "watch"
        watch.mkdir(mode=0o755)
        argv_log = root / "rsync-argv.log"
        argv_log.touch(mode=0o666)
        argv_log.chmod(0o666)
        (watch / "rsync").write_text(RSYNC_WATCH.format(log=argv_log, rsync=shutil.which("rsync")))
        (watch / "rsync").chmod(0o755)
        director_root = root / "director"  # the director's staging root (burst nodes: same)
        director_root.mkdir(mode=0o755)
        etc = root / "etc"
        etc.mkdir(mode=0o755)
        secrets = etc / "rsyncd.secrets"
        with RsyncDaemon(director_root, module=MODULE, secrets=secrets) as daemon:
            config = _config(root, daemon.port, director_root, secrets)
            with serving(root, config, director_root) as stage:
                stage.env["PATH"] = f"{watch}:{os.environ['PATH']}"
                with stage.database.session() as session:
                    session.add(
                        Provider(name="lab", type="local", region="lab", credentials_source="-")
                    )
                    session.flush()
                    director = ensure(session, "lab", "lab", actor="test")
                    director.private_address = "127.0.0.1"
                    director.state = DirectorState.READY.value  # as the lifecycle leaves it
                assert bin_dir.is_dir()
                key = rsyncd_auth.staging_key(munge_key_of(stage))
                yield DaemonLab(stage, daemon, secrets, key, argv_log)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def munge_key_of(stage: StageLab) -> Path:
    """The munge key the staging service derives users' passwords from (the machine's)."""
    settings = load_settings(Path(stage.env["CLUSTERMGR_CONFIG"]))
    return Path(settings.slurm.munge_key_path)


def own_password(lab: DaemonLab, user: Account, where: Path) -> tuple[str, dict[str, object]]:
    """What the service hands `user` for a chain of her own: its `begin` answer."""
    make_tree(user, where)
    chain = submit(lab.stage, user, where)
    stage_in, _out = transfer_ids(lab.stage, chain)
    number = int(stage_in.removeprefix("--transfer="))
    answer = lab.stage.raw(user, {"op": "begin", "args": {"transfer": number}})
    assert answer["ok"], answer
    plan = answer["result"]
    assert isinstance(plan, dict)
    return str(plan["rsync_password"]), chain


def test_a_tree_goes_in_and_back_through_the_module_as_the_user(
    dlab: DaemonLab, accounts: Accounts, alice_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lab, alice = dlab.stage, accounts.victim
    sums = make_tree(alice, alice_dir)
    chain = submit(lab, alice, alice_dir)
    area_url = f"rsync://{alice.name}@{{director}}:{dlab.daemon.port}/{MODULE}/"
    stage_id = str(chain["stage_id"])
    assert chain["stage_dir"] == str(lab.area_root / alice.name / stage_id)
    assert area_url in lab.run(alice, "cmsub", "--status", str(chain["job"]), "--json").stdout
    home = lab.area_root / alice.name
    assert (home.stat().st_uid, stat.S_IMODE(home.stat().st_mode)) == (alice.uid, 0o700)
    stage_in, stage_out = transfer_ids(lab, chain)

    moved = lab.run(alice, "cmsub-transfer", stage_in)
    assert moved.returncode == 0, moved.stderr
    assert "all verified" in moved.stdout
    staged = home / stage_id / "input"
    assert sha256_tree(staged) == sums
    assert {p.stat().st_uid for p in staged.rglob("*")} == {alice.uid}  # written as alice
    run_job(lab, alice, str(chain["stage_dir"]))  # the job, where burst nodes see the area
    back = lab.run(alice, "cmsub-transfer", stage_out)
    assert back.returncode == 0, back.stderr
    results = alice_dir / "results" / str(chain["job"])  # DEST/<jobid>/
    assert sha256_tree(results / "copy") == sums
    assert all(p.stat().st_uid == alice.uid for p in results.rglob("*"))
    assert not any((home / stage_id).iterdir())  # emptied after the verified stage-out

    secret = rsyncd_auth.password(dlab.key, alice.name)
    assert f"{alice.name}:{secret}\n" in dlab.secrets.read_text()
    calls = dlab.argv_log.read_text().splitlines()
    to_daemon = [c for c in calls if f"rsync://{alice.name}@127.0.0.1:" in c]
    assert to_daemon and all(c.startswith(f"{alice.uid} env=set ") for c in to_daemon)
    assert secret not in dlab.argv_log.read_text()  # never in argv
    for output in (moved.stdout, moved.stderr, back.stdout, back.stderr, caplog.text):
        assert secret not in output  # nor in the job's output or the service's log
    dump = "\n".join(sqlite3.connect(lab.db_path).iterdump())
    assert secret not in dump and "staging: begin by uid" in caplog.text


def _set_director(lab: StageLab, state: DirectorState) -> None:
    with lab.database.session() as session:
        ensure(session, "lab", "lab", actor="test").state = state.value


def test_a_stage_in_waits_for_its_director_and_then_runs_through_it(
    dlab: DaemonLab, accounts: Accounts, alice_dir: Path
) -> None:
    """Not READY: the row is `waiting` with the reason (`cmsub --status`, `clustermgr
    transfers list`), its region is demand for the director lifecycle; once READY, the
    transfer job that waited runs through it."""
    lab, alice = dlab.stage, accounts.victim
    sums = make_tree(alice, alice_dir)
    _set_director(lab, DirectorState.STOPPED)
    chain = submit(lab, alice, alice_dir)
    stage_in, _out = transfer_ids(lab, chain)
    argv = ["runuser", "-u", alice.name, "--", str(BIN / "cmsub-transfer"), stage_in]
    mover = subprocess.Popen(
        argv, env=lab.env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            status = lab.run(alice, "cmsub", "--status", str(chain["job"]), "--json")
            rows = json.loads(status.stdout)["transfers"]
            if rows[0]["state"] == "waiting":
                break
            time.sleep(0.2)
        assert rows[0]["state"] == "waiting", rows
        assert "waiting for director director-lab-lab (stopped)" in str(rows[0]["error"])
        settings = load_settings(Path(lab.env["CLUSTERMGR_CONFIG"]))
        assert staging_demand(settings, lab.database) == {"lab"}  # the lifecycle's demand
        assert mover.poll() is None  # still waiting, not failed
        _set_director(lab, DirectorState.READY)  # as the lifecycle leaves it
        out, err = mover.communicate(timeout=60)
    finally:
        if mover.poll() is None:
            mover.kill()
            mover.communicate()
    assert mover.returncode == 0, err
    assert "waiting for director director-lab-lab" in out and "all verified" in out
    staged = lab.area_root / alice.name / str(chain["stage_id"]) / "input"
    assert sha256_tree(staged) == sums
    assert staging_demand(settings, lab.database) == set()


def test_mallory_cannot_reach_alices_area_through_the_module(
    dlab: DaemonLab, accounts: Accounts, alice_dir: Path, mallory_dir: Path
) -> None:
    lab, alice, mallory = dlab.stage, accounts.victim, accounts.attacker
    make_tree(alice, alice_dir)
    chain = submit(lab, alice, alice_dir)
    stage_in, _out = transfer_ids(lab, chain)
    assert lab.run(alice, "cmsub-transfer", stage_in).returncode == 0
    stage_id = str(chain["stage_id"])
    alice_area = lab.area_root / alice.name / stage_id
    before = sha256_tree(alice_area)
    mine, _chain = own_password(dlab, mallory, mallory_dir)
    alice_secret = rsyncd_auth.password(dlab.key, alice.name)
    assert mine != alice_secret
    loot = mallory_dir / "loot"
    bait = mallory_dir / "bait.txt"
    bait.write_text("mallory's data")
    os.chown(bait, mallory.uid, mallory.gid)

    attempts = [
        (alice.name, mine, stage_id),  # alice's name, mallory's own password
        (alice.name, "wrong", stage_id),  # alice's name, a guessed password
        (alice.name, None, stage_id),  # no password at all
        (alice.name, "", stage_id),
        ("root", mine, f"{alice.name}/{stage_id}"),  # root is refused whatever it sends
    ]
    for user, password, path in attempts:
        code, err, _listed = dlab.rsync(
            mallory, "-r", dlab.url(user, path), str(loot), password=password
        )
        assert code == 5 and "auth failed" in err, (user, password, code, err)
        code, err, _listed = dlab.rsync(
            mallory, str(bait), dlab.url(user, f"{path}/"), password=password
        )
        assert code == 5, (user, code, err)
    # her own login, climbing out with `..`: the daemon keeps her inside her own chroot
    for path in (f"../{alice.name}/{stage_id}", f"../../{alice.name}/{stage_id}", f"/{alice.name}"):
        code, err, listed = dlab.rsync(
            mallory, "-r", dlab.url(mallory.name, path), str(loot), password=mine
        )
        assert code != 0, (path, listed)
        code, err, _listed = dlab.rsync(
            mallory, str(bait), dlab.url(mallory.name, f"{path}/x"), password=mine
        )
        assert not (lab.area_root / alice.name / "x").exists()
    # her own area works: the failures above are the module's refusals, not a broken lab
    code, err, _listed = dlab.rsync(
        mallory, str(bait), dlab.url(mallory.name, "mine/"), password=mine
    )
    assert code == 0, err
    assert (lab.area_root / mallory.name / "mine" / "bait.txt").stat().st_uid == mallory.uid
    assert not loot.exists() or not any(loot.rglob("*.bin"))  # none of alice's files
    assert sha256_tree(alice_area) == before  # and alice's area is as she left it
    assert not list(alice_area.rglob("bait.txt"))


def test_begin_never_hands_out_another_users_password(
    dlab: DaemonLab, accounts: Accounts, alice_dir: Path, mallory_dir: Path
) -> None:
    lab, alice, mallory = dlab.stage, accounts.victim, accounts.attacker
    alice_secret, chain = own_password(dlab, alice, alice_dir)
    stage_in, stage_out = transfer_ids(lab, chain)
    for transfer in (stage_in, stage_out):
        number = int(transfer.removeprefix("--transfer="))
        answer = lab.raw(mallory, {"op": "begin", "args": {"transfer": number}})
        assert not answer["ok"] and "is not yours" in str(answer["error"])
        assert alice_secret not in json.dumps(answer)
        claim = {"op": "begin", "args": {"transfer": number, "user": alice.name, "uid": alice.uid}}
        assert alice_secret not in json.dumps(lab.raw(mallory, claim))
    mine, _chain = own_password(dlab, mallory, mallory_dir)
    assert mine == rsyncd_auth.password(dlab.key, mallory.name) != alice_secret


def test_the_secrets_file_is_root_0600_and_the_key_is_the_munge_keys(
    dlab: DaemonLab, accounts: Accounts, alice_dir: Path
) -> None:
    own_password(dlab, accounts.victim, alice_dir)
    for path in (dlab.secrets, munge_key_of(dlab.stage)):
        info = path.stat()
        owners = (0, pwd.getpwnam("munge").pw_uid)  # root's secrets file, munge's key
        assert stat.S_IMODE(info.st_mode) & 0o077 == 0 and info.st_uid in owners, path
        for user in (accounts.victim, accounts.attacker):
            read = as_user(user.name, ["cat", str(path)])
            assert read.returncode != 0 and not read.stdout
    assert "root:" not in dlab.secrets.read_text()


def test_root_gets_no_daemon_area(dlab: DaemonLab) -> None:
    """root's requests never make a daemon area nor get a password for the module (and
    `auth users = root:deny` refuses root at the daemon, above)."""
    root = Account("root", 0, 0, "/root")
    request = {"stage_in": [], "stage_out": [], "bytes": 0, "files": 0}
    answer = dlab.stage.raw(root, {"op": "create", "args": request})
    assert not answer["ok"] and "root never" in str(answer["error"]), answer
    assert dlab.stage.rows() == []


class Relay:
    """A TCP relay between the clients and the staging service's TCP door that keeps every
    byte it passes, both ways: what someone on the network path sees."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.seen = bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                with self._lock:
                    self.seen += chunk
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()


def test_the_tcp_door_speaks_only_tls_and_the_wire_holds_no_password(
    dlab: DaemonLab, accounts: Accounts, alice_dir: Path
) -> None:
    """A transfer job off the head (no socket: `[staging] service`) begins over the TCP
    door and gets its rsync password: the bytes on the wire do not hold it; a plain TCP
    client with a valid credential gets no answer at all."""
    lab, alice = dlab.stage, accounts.victim
    config = Path(lab.env["CLUSTERMGR_CONFIG"])
    text = config.read_text()
    door = config.with_name("door.toml")
    door.write_text(
        text.replace("/run/cmsub.sock", "/run/door.sock").replace(
            "director_poll_s = 0.2\n", 'director_poll_s = 0.2\nlisten = "127.0.0.1:0"\n'
        )
    )
    _acquire_munge(30)
    service = StagingService(load_settings(door), lab.database)
    try:
        service.start()
        relay = Relay(service.tcp_port)
        off_head = config.with_name("off-head.toml")
        service_line = f'service = "127.0.0.1:{relay.port}"\n'
        off_head.write_text(
            text.replace(f"{lab.root}/run/cmsub.sock", "/nonexistent/cmsub.sock").replace(
                "director_poll_s = 0.2\n", "director_poll_s = 0.2\n" + service_line
            )
        )
        off_head.chmod(0o644)
        sums = make_tree(alice, alice_dir)
        chain = submit(lab, alice, alice_dir)
        stage_in, _ = transfer_ids(lab, chain)
        env = {**lab.env, "CLUSTERMGR_CONFIG": str(off_head)}
        moved = as_user(alice.name, [str(BIN / "cmsub-transfer"), stage_in], env=env)
        assert moved.returncode == 0, moved.stderr
        staged = lab.area_root / alice.name / str(chain["stage_id"]) / "input"
        assert sha256_tree(staged) == sums  # through the module, by the password it got

        secret = rsyncd_auth.password(dlab.key, alice.name)
        wire = bytes(relay.seen)
        assert b"rsync_password" not in wire and secret.encode() not in wire, "in clear"
        assert len(wire) > 1000 and b"MUNGE:" not in wire  # TLS records, not JSON lines

        body = json.dumps({"op": "begin", "args": {"transfer": 1}}).encode() + b"\n"
        credential = as_user(alice.name, ["munge", "-s", hashlib.sha256(body).hexdigest()])
        with socket.create_connection(("127.0.0.1", service.tcp_port), timeout=10) as plain:
            plain.sendall(credential.stdout.strip().encode() + b"\n" + body)
            try:
                answer = plain.recv(65536)
            except ConnectionResetError:  # the failed handshake closed it with data unread
                answer = b""
        assert b"rsync_password" not in answer and not answer.startswith(b"{"), answer
        relay.close()
    finally:
        service.stop()
        _release_munge()

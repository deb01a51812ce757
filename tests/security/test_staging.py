"""Hostile staging: `cmsec-mallory` attacks `cmsec-alice` through cmsub, `cmsub-transfer`
and raw requests to the staging service, with a database only root can open.

The service is cm-scale's (clustermgr.staging.service), started here as root on a socket
of the lab; Slurm is a stand-in `sbatch`/`scontrol`/`scancel` (the edge of the world: they
log their argv and caller and print job ids); the "job" between stage-in and stage-out is
a shell run as alice that reads the staged tree and writes results.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustermgr.config import load_settings
from clustermgr.core.errors import StagingError
from clustermgr.db.database import Database
from clustermgr.db.models import Transfer
from clustermgr.staging import channel
from clustermgr.staging.service import StagingService
from clustermgr.staging.wire import make_credential
from tests.conftest import REPO
from tests.labs.slurmlab import _acquire_munge, _release_munge
from tests.security.conftest import Account, Accounts, as_user

BIN = Path(sys.executable).parent
FAKE_SLURM = """#!{python}
import os, sys
here = os.path.dirname(sys.argv[0])
with open(os.path.join(here, "calls.log"), "a") as log:
    log.write(repr([os.getuid(), os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
if os.path.basename(sys.argv[0]) == "sbatch":
    with open(os.path.join(here, "next_id"), "r+") as state:
        number = int(state.read() or 1000)
        state.seek(0)
        state.write(str(number + 1))
        state.truncate()
    print(f"{{number}};lab")
"""
# a raw client of the staging service, run as a user: it sends whatever it is given
RAW_REQUEST = """
import socket, ssl, subprocess, sys, hashlib
mode, where, body = sys.argv[1], sys.argv[2], sys.argv[3].encode() + b"\\n"
if mode == "unix":
    sock = socket.socket(socket.AF_UNIX); sock.connect(where); sock.sendall(body)
    reader = sock.makefile("rb")
else:
    credential = sys.stdin.buffer.read() if mode == "tcp-given" else subprocess.run(
        ["munge", "-s", hashlib.sha256(body).hexdigest()], capture_output=True, check=True
    ).stdout
    host, port = where.rsplit(":", 1)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE  # a raw client trusts anyone
    sock = tls.wrap_socket(socket.create_connection((host, int(port))))
    reader = sock.makefile("rb")
    reader.readline()  # the service's proof (its MUNGE credential), unchecked here
    sock.sendall(credential.strip() + b"\\n" + body)
print(reader.readline().decode(), end="")
"""


@dataclass
class StageLab:
    root: Path
    db_path: Path
    socket: Path
    area_root: Path
    bin_dir: Path
    env: dict[str, str]
    database: Database

    def calls(self) -> list[list[object]]:
        lines = (self.bin_dir / "calls.log").read_text().splitlines()
        return [eval(line) for line in lines]  # noqa: S307 (the stand-in's own repr)

    def run(
        self, user: Account, *argv: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        tool = argv[0] if argv[0].startswith("/") else str(BIN / argv[0])
        return as_user(user.name, [tool, *argv[1:]], env=self.env, input_text=stdin)

    def raw(self, user: Account, request: Mapping[str, object]) -> dict[str, object]:
        argv = [sys.executable, "-c", RAW_REQUEST, "unix", str(self.socket), json.dumps(request)]
        done = as_user(user.name, argv)
        assert done.returncode == 0, done.stderr
        answer: dict[str, object] = json.loads(done.stdout)
        return answer

    def rows(self) -> list[tuple[int, str, int | None, str, str]]:
        with self.database.session() as session:
            return [
                (r.id, r.user, r.uid, r.direction, r.state)
                for r in session.query(Transfer).order_by(Transfer.id)
            ]


def _write_config(
    root: Path, name: str = "clustermgr.toml", socket: str = "", extra: str = ""
) -> Path:
    config = root / name
    socket = socket or f"{root}/run/cmsub.sock"
    config.write_text(
        f'[database]\nurl = "sqlite:///{root}/state/cm.db"\n'
        f'[slurm]\nbin_dir = "{root}/slurm-bin"\n'
        '[[providers]]\nname = "lab"\ntype = "local"\nregion = "lab"\n'
        '[staging]\ndata_mover_partition = "movers"\nquota_bytes = 100000000\n'
        f'transfer_command = "{BIN / "cmsub-transfer"}"\nsocket = "{socket}"\n'
        f"{extra}"
        '[[staging.regions]]\nprovider = "lab"\npartition = "cloud"\n'
        f'rsync_target = "{root}/staging"\n'
    )
    config.chmod(0o644)
    return config


def prepare(root: Path) -> Path:
    """A lab's directories: the database's (root's alone), the socket's, and the stand-in
    Slurm's (its bin_dir, returned)."""
    (root / "state").mkdir(mode=0o700)
    (root / "run").mkdir(mode=0o755)
    bin_dir = root / "slurm-bin"
    bin_dir.mkdir(mode=0o755)
    for tool in ("sbatch", "scontrol", "scancel"):
        (bin_dir / tool).write_text(FAKE_SLURM.format(python=sys.executable))
        (bin_dir / tool).chmod(0o755)
    for shared in ("calls.log", "next_id"):  # the stand-ins' own state
        (bin_dir / shared).write_text("")
        (bin_dir / shared).chmod(0o666)  # the stand-in Slurm's log
    return bin_dir


@contextlib.contextmanager
def serving(root: Path, config: Path, area_root: Path) -> Iterator[StageLab]:
    """The database (0600, root's) made by `clustermgr db upgrade`, and the staging service
    started on it as cm-scale starts it, for the lab `prepare` made."""
    env = {"CLUSTERMGR_CONFIG": str(config), "PYTHONPATH": str(REPO)}
    upgrade = subprocess.run(
        [str(BIN / "clustermgr"), "db", "upgrade"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert upgrade.returncode == 0, upgrade.stderr
    db_path = root / "state" / "cm.db"
    db_path.chmod(0o600)
    database = Database(f"sqlite:///{db_path}")
    service = StagingService(load_settings(config), database)
    try:
        service.start()
        socket_path = root / "run" / "cmsub.sock"
        yield StageLab(root, db_path, socket_path, area_root, root / "slurm-bin", env, database)
    finally:
        service.stop()
        database.dispose()


@pytest.fixture
def lab(accounts: Accounts) -> Iterator[StageLab]:
    root = Path(tempfile.mkdtemp(prefix="cmsec-staging-"))
    root.chmod(0o755)
    try:
        prepare(root)
        area_root = root / "staging"
        area_root.mkdir()
        area_root.chmod(0o1777)  # the worst an admin could choose: anyone may make entries
        with serving(root, _write_config(root), area_root) as staged:
            yield staged
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _give(user: Account, *paths: Path) -> None:
    for path in paths:
        for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
            os.chown(item, user.uid, user.gid, follow_symlinks=False)


def make_tree(user: Account, where: Path) -> dict[str, str]:
    """alice's input: nested files with awkward names; their sha256 by relative path."""
    tree = where / "data"
    (tree / "sub dir").mkdir(parents=True)
    sums = {}
    for rel in ("a.bin", "sub dir/b c.bin", "sub dir/$(x);.bin"):
        content = os.urandom(30_000)
        (tree / rel).write_bytes(content)
        sums[rel] = hashlib.sha256(content).hexdigest()
    (where / "job.sh").write_text("#!/bin/sh\ntrue\n")
    _give(user, tree, where / "job.sh")
    return sums


def submit(lab: StageLab, user: Account, where: Path) -> dict[str, object]:
    done = lab.run(
        user,
        "cmsub",
        "--stage-in",
        f"{where / 'data'}:input",
        "--stage-out",
        f"results:{where / 'results'}",
        "--json",
        str(where / "job.sh"),
    )
    assert done.returncode == 0, done.stderr
    chain: dict[str, object] = json.loads(done.stdout)
    return chain


def transfer_ids(lab: StageLab, chain: dict[str, object]) -> tuple[str, str]:
    """The --transfer= argument of the chain's stage-in and stage-out jobs."""
    batches = [
        c for c in lab.calls() if c[1] == "sbatch" and f"--comment=cmsub {chain['stage_id']}" in c
    ]
    return str(batches[0][-1]), str(batches[-1][-1])


def sha256_tree(tree: Path) -> dict[str, str]:
    return {
        str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in tree.rglob("*")
        if p.is_file()
    }


def run_job(lab: StageLab, user: Account, stage_dir: str) -> None:
    """The user's job: reads the staged tree, writes a copy of it and a checksum list."""
    script = (
        'set -e; cd "$0"; mkdir results; cp -r input results/copy; '
        "find input -type f -exec sha256sum {} + > results/sums.txt"
    )
    done = as_user(user.name, ["sh", "-c", script, stage_dir])
    assert done.returncode == 0, done.stderr


def test_the_happy_path_needs_no_database_access(
    lab: StageLab, accounts: Accounts, alice_dir: Path
) -> None:
    alice = accounts.victim
    opened = as_user(
        alice.name,
        ["python3", "-c", f"import sqlite3; sqlite3.connect('{lab.db_path}').execute('select 1')"],
    )
    assert opened.returncode != 0  # she cannot even open it
    sums = make_tree(alice, alice_dir)
    chain = submit(lab, alice, alice_dir)
    stage_in, stage_out = transfer_ids(lab, chain)
    user_area = lab.area_root / alice.name
    info = user_area.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (alice.uid, 0o700)

    moved = lab.run(alice, "cmsub-transfer", stage_in)
    assert moved.returncode == 0, moved.stderr
    assert "all verified" in moved.stdout
    run_job(lab, alice, str(chain["stage_dir"]))
    back = lab.run(alice, "cmsub-transfer", stage_out)
    assert back.returncode == 0, back.stderr

    results = alice_dir / "results" / str(chain["job"])  # DEST/<jobid>/
    assert sha256_tree(results / "copy") == sums  # every file back, every byte the same
    listed = (results / "sums.txt").read_text()
    assert all(digest in listed for digest in sums.values())
    assert all(p.stat().st_uid == alice.uid for p in results.rglob("*"))
    assert not Path(str(chain["stage_dir"])).exists()  # cleaned after the stage-out
    status = lab.run(alice, "cmsub", "--status", str(chain["job"]), "--json")
    rows = json.loads(status.stdout)["transfers"]
    assert [(r["direction"], r["state"], r["files_verified"]) for r in rows] == [
        ("in", "done", 3),
        ("out", "done", 4),
    ]
    assert lab.rows()[0][1:3] == (alice.name, alice.uid)


def test_the_database_is_out_of_reach(lab: StageLab, accounts: Accounts) -> None:
    mallory = accounts.attacker
    attacks = [
        "update nodes set state = 'REQUESTED'",
        "delete from events",
        "insert into transfers (job_id, user, direction, source, destination, transport, state)"
        " values ('1', 'cmsec-alice', 'out', '', '', 'rsync', 'done')",
    ]
    for statement in attacks:
        code = (
            f"import sqlite3; c = sqlite3.connect('{lab.db_path}'); "
            f"c.execute({statement!r}); c.commit()"
        )
        done = as_user(mallory.name, ["python3", "-c", code])
        assert done.returncode != 0 and "unable to open" in done.stderr, done.stderr
    assert lab.rows() == []
    with sqlite3.connect(lab.db_path) as db:
        assert db.execute("select count(*) from transfers").fetchone() == (0,)


def test_a_row_claiming_another_user_is_written_as_its_sender(
    lab: StageLab, accounts: Accounts
) -> None:
    mallory, alice = accounts.attacker, accounts.victim
    answer = lab.raw(
        mallory,
        {
            "op": "create",
            "args": {
                "stage_in": [],
                "stage_out": [["x", f"{alice.home}/precious"]],
                "bytes": 0,
                "files": 0,
                "user": alice.name,  # ignored: the kernel says who is calling
                "uid": alice.uid,
            },
        },
    )
    assert answer["ok"], answer
    assert {(user, uid) for _id, user, uid, _d, _s in lab.rows()} == {(mallory.name, mallory.uid)}


def test_another_users_transfers_and_jobs_are_out_of_reach(
    lab: StageLab, accounts: Accounts, alice_dir: Path
) -> None:
    mallory, alice = accounts.attacker, accounts.victim
    make_tree(alice, alice_dir)
    chain = submit(lab, alice, alice_dir)
    stage_in, stage_out = transfer_ids(lab, chain)
    before = lab.rows()

    for transfer in (stage_in, stage_out):
        run = lab.run(mallory, "cmsub-transfer", transfer)
        assert run.returncode == 2, run.stderr
        assert f"is not yours ({mallory.name})" in run.stderr
        assert run.stderr.count("\n") == 1
    number = int(stage_in.removeprefix("--transfer="))
    for request in (
        {"op": "finish", "args": {"transfer": number, "error": "mallory was here"}},
        {"op": "begin", "args": {"transfer": number}},
        {"op": "forget", "args": {"stage_id": chain["stage_id"]}},
        {"op": "cleaned", "args": {"stage_ids": [chain["stage_id"]]}},
    ):
        answer = lab.raw(mallory, request)
        assert not answer["ok"] and answer["exit"] == 2, answer
        assert "is not yours" in str(answer["error"])
    status = lab.run(mallory, "cmsub", "--status", str(chain["job"]))
    assert status.returncode == 2 and "none of your cmsub chains" in status.stderr
    assert lab.rows() == before  # alice's rows untouched: still pending
    assert not [c for c in lab.calls() if c[1] == "scancel"]  # none of her jobs cancelled


def test_an_area_made_by_someone_else_is_refused(
    lab: StageLab, accounts: Accounts, alice_dir: Path, mallory_dir: Path
) -> None:
    mallory, alice = accounts.attacker, accounts.victim
    make_tree(alice, alice_dir)
    planted = lab.area_root / alice.name
    for plant in (
        ["mkdir", "-m", "777", str(planted)],
        ["ln", "-s", str(mallory_dir), str(planted)],  # or a link to her own directory
    ):
        made = as_user(mallory.name, plant)
        assert made.returncode == 0, made.stderr
        refused = lab.run(
            alice, "cmsub", "--stage-in", f"{alice_dir / 'data'}:input", str(alice_dir / "job.sh")
        )
        assert refused.returncode == 1, refused.stderr  # not hers to fix: the admin's
        assert "refused" in refused.stderr and str(planted) in refused.stderr
        assert refused.stderr.count("\n") == 1
        assert lab.rows() == [] and lab.calls() == []  # nothing recorded, nothing submitted
        as_user(mallory.name, ["rm", "-rf", str(planted)])
    assert list(mallory_dir.iterdir()) == []  # none of alice's data reached mallory


def test_the_area_cannot_be_swapped_and_delivers_the_users_own_data(
    lab: StageLab, accounts: Accounts, alice_dir: Path, mallory_dir: Path
) -> None:
    mallory, alice = accounts.attacker, accounts.victim
    sums = make_tree(alice, alice_dir)
    chain = submit(lab, alice, alice_dir)
    stage_in, stage_out = transfer_ids(lab, chain)
    assert lab.run(alice, "cmsub-transfer", stage_in).returncode == 0
    area = lab.area_root / alice.name
    fake = mallory_dir / "fake"
    (fake / "results").mkdir(parents=True)
    _give(mallory, fake)
    for attempt in (
        ["mv", str(area), str(lab.area_root / "gone")],
        ["rm", "-rf", str(area)],
        ["ls", str(area)],
        ["cp", "-r", str(fake / "results"), str(Path(str(chain["stage_dir"])) / "results")],
    ):
        done = as_user(mallory.name, attempt)
        assert done.returncode != 0, attempt
    run_job(lab, alice, str(chain["stage_dir"]))
    back = lab.run(alice, "cmsub-transfer", stage_out)
    assert back.returncode == 0, back.stderr
    results = alice_dir / "results" / str(chain["job"])  # DEST/<jobid>/
    assert sha256_tree(results / "copy") == sums
    assert not results.stat().st_mode & 0o002  # not left open to others


def test_a_link_out_of_the_tree_made_after_submission_is_not_followed(
    lab: StageLab, accounts: Accounts, alice_dir: Path
) -> None:
    alice = accounts.victim
    make_tree(alice, alice_dir)
    chain = submit(lab, alice, alice_dir)
    stage_in, _out = transfer_ids(lab, chain)
    link = alice_dir / "data" / "esc"
    os.symlink("/", link)
    os.chown(link, alice.uid, alice.gid, follow_symlinks=False)
    failed = lab.run(alice, "cmsub-transfer", stage_in)
    assert failed.returncode == 1
    assert str(link) in failed.stderr and "points outside the tree" in failed.stderr
    staged = Path(str(chain["stage_dir"])) / "input"
    assert not os.path.lexists(staged / "esc")
    status = lab.run(alice, "cmsub", "--status", str(chain["job"]), "--json")
    rows = json.loads(status.stdout)["transfers"]
    assert [r["state"] for r in rows] == ["failed", "cancelled"]
    # the chain's job and stage-out are cancelled by alice herself (scancel as her)
    assert [c[:2] for c in lab.calls() if c[1] == "scancel"] == [[alice.uid, "scancel"]]


def test_rsync_does_not_copy_a_link_leading_out(tmp_path: Path) -> None:
    """The second line of defence (a link made between the check and rsync): --safe-links."""
    from clustermgr.staging.checks import StageIn
    from clustermgr.staging.progress import Quiet
    from clustermgr.staging.run import move_rsync

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_text("data")
    os.symlink("/etc", tree / "esc")
    os.symlink("f", tree / "inside")
    area = tmp_path / "area"
    move_rsync("in", str(area), [StageIn(tree, "in", True)], [], Quiet())
    assert not os.path.lexists(area / "in" / "esc")
    assert os.readlink(area / "in" / "inside") == "f"


def test_cleanup_removes_nothing_outside_the_users_own_area(
    lab: StageLab, accounts: Accounts, alice_dir: Path
) -> None:
    alice = accounts.victim
    precious = alice_dir / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    _give(alice, precious)
    with lab.database.session() as session:  # a row the old, database-writing cmsub allowed
        session.add(
            Transfer(
                job_id="7",
                user=alice.name,
                uid=alice.uid,
                direction="out",
                source="",
                destination="",
                transport="rsync",
                state="done",
                stage_id="planted",
                stage_dir=str(precious),
                finished_at=None,
            )
        )
    make_tree(alice, alice_dir)
    chain = submit(lab, alice, alice_dir)
    stage_in, stage_out = transfer_ids(lab, chain)
    assert lab.run(alice, "cmsub-transfer", stage_in).returncode == 0
    run_job(lab, alice, str(chain["stage_dir"]))
    assert lab.run(alice, "cmsub-transfer", stage_out).returncode == 0
    assert (precious / "thesis.tex").read_text() == "years of work"
    assert not Path(str(chain["stage_dir"])).exists()  # her real area was cleaned


@pytest.fixture
def munge_service(lab: StageLab) -> Iterator[tuple[StagingService, Path]]:
    """A second door: TCP on loopback, MUNGE credentials at most 3 s old; clients off the
    head (no socket) reach it by `[staging] service`."""
    _acquire_munge(30)
    config = _write_config(
        lab.root,
        "service.toml",
        f"{lab.root}/run/tcp.sock",
        'listen = "127.0.0.1:0"\ncredential_max_age_s = 3\n',
    )
    # the TCP door's TLS identity (the munge key server's) lives in the state dir
    config.write_text(config.read_text() + f'[daemon]\nstate_dir = "{lab.root}/state/daemon"\n')
    service = StagingService(load_settings(config), lab.database)
    try:
        service.start()
        client_config = _write_config(
            lab.root,
            "client.toml",
            "/nonexistent/cmsub.sock",
            f'service = "127.0.0.1:{service.tcp_port}"\n',
        )
        yield service, client_config
    finally:
        service.stop()
        _release_munge()


def test_requests_over_tcp_carry_a_fresh_munge_credential_for_that_request(
    lab: StageLab, accounts: Accounts, alice_dir: Path, munge_service: tuple[StagingService, Path]
) -> None:
    service, client_config = munge_service
    alice, mallory = accounts.victim, accounts.attacker
    where = f"127.0.0.1:{service.tcp_port}"
    make_tree(alice, alice_dir)
    chain = submit(lab, alice, alice_dir)
    env = {**lab.env, "CLUSTERMGR_CONFIG": str(client_config)}
    mine = as_user(
        alice.name, [str(BIN / "cmsub"), "--status", str(chain["job"]), "--json"], env=env
    )
    assert mine.returncode == 0, mine.stderr  # over TCP, as alice (munged says so)
    assert json.loads(mine.stdout)["transfers"][0]["user"] == alice.name
    theirs = as_user(mallory.name, [str(BIN / "cmsub"), "--status", str(chain["job"])], env=env)
    assert theirs.returncode == 2 and "none of your cmsub chains" in theirs.stderr

    body = json.dumps({"op": "status", "args": {"job": str(chain["job"])}})
    digest = hashlib.sha256(body.encode() + b"\n").hexdigest()
    credential = as_user(mallory.name, ["munge", "-s", digest]).stdout

    def send(text: str, given: str) -> dict[str, object]:
        argv = [sys.executable, "-c", RAW_REQUEST, "tcp-given", where, text]
        done = as_user(mallory.name, argv, input_text=given)
        assert done.returncode == 0, done.stderr
        answer: dict[str, object] = json.loads(done.stdout)
        return answer

    assert send(body, credential)["ok"]  # mallory's own request: an empty answer
    replayed = send(body, credential)
    assert not replayed["ok"] and "Replayed" in str(replayed["error"]), replayed
    other = json.dumps({"op": "forget", "args": {"stage_id": chain["stage_id"]}})
    fresh = as_user(mallory.name, ["munge", "-s", digest]).stdout
    rebound = send(other, fresh)  # a credential made for one request carrying another
    assert not rebound["ok"] and "made for another request" in str(rebound["error"])
    stale = as_user(mallory.name, ["munge", "-s", digest]).stdout
    time.sleep(4.5)
    old = send(body, stale)
    assert not old["ok"] and "stale" in str(old["error"]), old
    assert not send(body, "MUNGE:forged:")["ok"]
    assert [r[4] for r in lab.rows()] == ["pending", "pending"]


def test_cm_scale_serves_the_channel_and_takes_it_down_on_stop(
    lab: StageLab, accounts: Accounts, alice_dir: Path
) -> None:
    """The service as sites run it: threads of cm-scale, its socket gone when it stops."""
    alice = accounts.victim
    socket_path = lab.root / "run" / "daemon.sock"
    config = _write_config(
        lab.root,
        "daemon.toml",
        str(socket_path),
    )
    config.write_text(
        config.read_text()
        + f"[daemon]\ninterval_s = 600\nreconcile_interval_s = 600\nmetrics_port = 0\n"
        f'state_dir = "{lab.root}/state/daemon"\n'
    )
    log = (lab.root / "state" / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [str(BIN / "cm-scale"), "--skip-slurm-check", "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "CLUSTERMGR_CONFIG": str(config)},
    )
    try:
        deadline = time.monotonic() + 30
        while not socket_path.is_socket() and time.monotonic() < deadline:
            assert daemon.poll() is None, (lab.root / "state" / "daemon.log").read_text()
            time.sleep(0.2)
        assert socket_path.is_socket()
        assert socket_path.stat().st_mode & 0o777 == 0o666
        make_tree(alice, alice_dir)
        env = {**lab.env, "CLUSTERMGR_CONFIG": str(config)}
        done = as_user(
            alice.name,
            [
                str(BIN / "cmsub"),
                "--stage-in",
                f"{alice_dir / 'data'}:in",
                "--json",
                str(alice_dir / "job.sh"),
            ],
            env=env,
        )
        assert done.returncode == 0, done.stderr
        chain = json.loads(done.stdout)
        status = as_user(alice.name, [str(BIN / "cmsub"), "--status", str(chain["job"])], env=env)
        assert status.returncode == 0 and "pending" in status.stdout, status.stderr
        assert [(r[1], r[4]) for r in lab.rows()] == [(alice.name, "pending")] * 2
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
        log.close()
    assert not os.path.lexists(socket_path)


def _impostor(proof_of: Callable[[bytes], bytes]) -> tuple[int, bytearray]:
    """A TLS server with a certificate of its own, sending `proof_of(its DER)` as its proof
    and keeping whatever the client sends after that: (port, what it received)."""
    import trustme

    cert = trustme.CA().issue_cert("127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(context)
    der = ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())
    listener = socket.create_server(("127.0.0.1", 0))
    received = bytearray()

    def serve() -> None:
        raw, _ = listener.accept()
        with context.wrap_socket(raw, server_side=True) as conn:
            conn.sendall(proof_of(der))
            conn.settimeout(5)
            with contextlib.suppress(OSError):
                while chunk := conn.recv(65536):
                    received.extend(chunk)
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], received


def test_a_client_sends_nothing_to_a_door_that_cannot_prove_it_is_cm_scale(
    accounts: Accounts,
) -> None:
    """Someone in the middle (or a user's listener) presents its own certificate: with a
    root credential made for another certificate (the real door's, relayed) or a
    credential of its own uid for its certificate, the client stops before its request."""
    mallory = accounts.attacker
    body = json.dumps({"op": "begin", "args": {"transfer": 1}}).encode() + b"\n"

    def relayed(_der: bytes) -> bytes:
        return make_credential(b"the real door's certificate")  # root's, another payload

    def own(der: bytes) -> bytes:
        made = as_user(mallory.name, ["munge", "-s", hashlib.sha256(der).hexdigest()])
        return made.stdout.strip().encode() + b"\n"

    _acquire_munge(30)
    try:
        for proof_of, why in ((relayed, "made for another request"), (own, "not root")):
            port, received = _impostor(proof_of)
            with pytest.raises(StagingError, match="did not prove itself") as caught:
                channel.call(f"127.0.0.1:{port}", body, 60, 10)
            assert why in str(caught.value)
            time.sleep(0.2)
            assert bytes(received) == b""  # no credential, no request
    finally:
        _release_munge()

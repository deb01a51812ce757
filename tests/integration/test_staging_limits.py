"""The staging service's limits (docs/staging.md "Limits"): a deadline per whole request,
caps per caller and in total, a reserve of descriptors for the rest of cm-scale, and
cmsub waiting out a full listen queue. The service runs in this process, as cm-scale
runs it; its clients are real sockets (as root, and as `nobody` for a second caller).
The hostile-user version, with cm-scale itself: tests/security/test_staging_starve.py."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clustermgr.config import Settings, load_settings
from clustermgr.core.errors import ConfigError
from clustermgr.db.database import Database
from clustermgr.staging import client
from clustermgr.staging.admission import descriptor_limit, open_descriptors
from clustermgr.staging.service import StagingService
from tests.conftest import REPO

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent
NOBODY = 65534
STATUS = b'{"op":"status","args":{"job":"1"}}\n'
HOLD = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""
# the service in a process that then runs out of descriptors (other files took them all),
# until told to give them back
OUT_OF_DESCRIPTORS = """
import os, resource, sys, time
from pathlib import Path
from clustermgr.config import Settings, load_settings
from clustermgr.db.database import Database
from clustermgr.staging.admission import open_descriptors
from clustermgr.staging.service import StagingService
settings = load_settings(Path(sys.argv[1]))
StagingService(settings, Database(str(settings.database.url))).start()
_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (open_descriptors() + 40, hard))
hog = []
try:
    while True:
        hog.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
print("full", flush=True)
sys.stdin.readline()
for fd in hog:
    os.close(fd)
print("released", flush=True)
time.sleep(60)
"""
KNOCK = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(10)
print(s.makefile("rb").readline().decode(), end="")
"""


@contextlib.contextmanager
def configured(limits: str) -> Iterator[Path]:
    """A config with `limits` in its [staging] table and its database made; its path."""
    root = Path(tempfile.mkdtemp(prefix="cm-limits-"))
    try:
        root.chmod(0o755)  # `nobody` reaches the socket
        config = root / "clustermgr.toml"
        config.write_text(
            f'[database]\nurl = "sqlite:///{root}/cm.db"\n'
            '[[providers]]\nname = "lab"\ntype = "local"\nregion = "lab"\n'
            f'[staging]\nsocket = "{root}/run/cmsub.sock"\n{limits}\n'
            f'[[staging.regions]]\nprovider = "lab"\npartition = "cloud"\n'
            f'rsync_target = "{root}/staging"\n'
        )
        env = {**os.environ, "CLUSTERMGR_CONFIG": str(config), "PYTHONPATH": str(REPO)}
        env.pop("CLUSTERMGR_DB", None)
        upgrade = subprocess.run(
            [str(BIN / "clustermgr"), "db", "upgrade"], env=env, capture_output=True, check=False
        )
        assert upgrade.returncode == 0, upgrade.stderr
        yield config
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def settings_beside(socket_path: Path) -> Settings:
    """What a client on this host reads: the config next to the service's socket."""
    return load_settings(socket_path.parent.parent / "clustermgr.toml")


@contextlib.contextmanager
def service(limits: str) -> Iterator[Path]:
    """The staging service with `limits` in its [staging] table; its socket's path."""
    with configured(limits) as config:
        settings = load_settings(config)
        database = Database(str(settings.database.url))
        staging = StagingService(settings, database)
        staging.start()
        try:
            yield settings.staging.socket
        finally:
            staging.stop()
            database.dispose()


def connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(path))
    return sock


def answer_of(sock: socket.socket, timeout_s: float = 10) -> dict[str, object]:
    sock.settimeout(timeout_s)
    line = sock.makefile("rb").readline()
    assert line, "closed without an answer"
    answer: dict[str, object] = json.loads(line)
    return answer


def answered(path: Path) -> bool:
    """A real request gets its answer (the service is not stuck)."""
    with connect(path) as sock:
        sock.sendall(STATUS)
        return answer_of(sock).get("ok") is True


def test_a_client_trickling_its_request_is_cut_at_one_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    with service("request_timeout_s = 1") as path, connect(path) as sock:
        started = time.monotonic()
        sock.settimeout(0.3)
        closed_after = None
        while time.monotonic() - started < 10:  # a byte every 0.3 s: no single read waits 1 s
            with contextlib.suppress(TimeoutError):
                if sock.recv(100) == b"":
                    closed_after = time.monotonic() - started
                    break
            with contextlib.suppress(OSError):
                sock.send(b" ")
        assert closed_after is not None and 0.9 < closed_after < 3, closed_after
        assert "no whole request within 1 s" in caplog.text
        assert answered(path)


def test_a_callers_connections_past_its_cap_are_refused_at_once_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    limits = "max_connections = 4\nmax_connections_per_caller = 3\nrequest_timeout_s = 30"
    with service(limits) as path, contextlib.ExitStack() as held:
        idle = [held.enter_context(connect(path)) for _ in range(3)]
        for _ in range(5):
            started = time.monotonic()
            with connect(path) as extra:
                answer = answer_of(extra)
            assert time.monotonic() - started < 2
            assert answer["ok"] is False and answer["exit"] == 1
            assert "busy: 3 connections open, at most 3 per caller" in str(answer["error"])
        assert caplog.text.count("dropping connections of uid 0") == 1
        # another caller still gets in, up to the total
        hold = [sys.executable, "-c", HOLD, str(path)]
        as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        nobody = held.enter_context(
            subprocess.Popen([*as_nobody, *hold], stdout=subprocess.PIPE, text=True)
        )
        held.callback(nobody.kill)
        assert nobody.stdout is not None and nobody.stdout.readline().strip() == "held"
        knock = [sys.executable, "-c", KNOCK, str(path)]
        refused = subprocess.run(
            [*as_nobody, *knock], capture_output=True, text=True, timeout=30, check=False
        )
        assert "the service holds 4 connections, at most 4" in refused.stdout, refused
        for sock in idle:
            sock.close()
        nobody.kill()
        deadline = time.monotonic() + 10
        while "uid 0's connections have ended; 5 were dropped" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
        assert answered(path)


def test_cmsub_asks_again_while_the_service_is_busy_with_its_callers_cap() -> None:
    limits = "max_connections_per_caller = 2\nrequest_timeout_s = 30"
    with service(limits) as path:
        settings = settings_beside(path)
        idle = [connect(path), connect(path)]
        frees = threading.Timer(1.0, idle[0].close)
        started = time.monotonic()
        frees.start()  # one of the caller's places frees up in a second
        try:
            assert client.call(settings.staging, "status", job="1") == {"transfers": []}
        finally:
            frees.join()
            idle[1].close()
        assert time.monotonic() - started > 0.9  # it was refused first, then got in


def test_no_connection_is_admitted_into_the_descriptor_reserve(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    free_now = descriptor_limit() - open_descriptors()
    reserve = free_now - 8  # the service's own socket and a few connections fit above it
    with service(f"descriptor_reserve = {reserve}\nmax_connections_per_caller = 256") as path:
        assert "exceed the descriptor limit" in caplog.text  # said at start
        with contextlib.ExitStack() as held:
            refused = None
            for _ in range(40):
                sock = held.enter_context(connect(path))
                sock.settimeout(0.5)  # an admitted one waits for its request: no answer
                with contextlib.suppress(TimeoutError):
                    refused = sock.recv(4096)
                if refused:
                    break
            assert refused is not None, "every connection was admitted"
            assert f"{reserve} are kept for cm-scale's cycle" in refused.decode()
        assert answered(path)


@pytest.fixture
def full_queue() -> Iterator[tuple[Path, socket.socket]]:
    """A listening socket whose queue (backlog 1) is full: nothing accepts yet."""
    where = Path(tempfile.mkdtemp(prefix="cm-queue-"))
    path = where / "s.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)
    queued = []
    try:
        while True:
            sock = socket.socket(socket.AF_UNIX)
            sock.setblocking(False)
            try:
                sock.connect(str(path))
            except BlockingIOError:
                sock.close()
                break
            queued.append(sock)
        yield path, listener
    finally:
        for sock in queued:
            sock.close()
        listener.close()
        subprocess.run(["rm", "-rf", str(where)], check=False)


def test_cmsub_waits_out_a_full_queue_until_a_place_is_free(
    full_queue: tuple[Path, socket.socket],
) -> None:
    path, listener = full_queue
    with socket.socket(socket.AF_UNIX) as sock:
        started = time.monotonic()
        with socket.socket(socket.AF_UNIX) as eager:  # what cmsub did before: fail at once
            eager.settimeout(10)
            with pytest.raises(BlockingIOError):
                eager.connect(str(path))
        frees = threading.Timer(1.0, lambda: listener.accept()[0].close())
        frees.start()  # a place frees up in a second
        client.connect_waiting(sock, path, patience_s=10)
        frees.join()
        assert time.monotonic() - started > 0.9  # it waited, and got in
        assert time.monotonic() - started < 5


def test_cmsub_gives_up_on_a_queue_that_stays_full_after_its_patience(
    full_queue: tuple[Path, socket.socket],
) -> None:
    path, _listener = full_queue
    with socket.socket(socket.AF_UNIX) as sock:
        started = time.monotonic()
        with pytest.raises(BlockingIOError, match=r"its queue stayed full for 1\.5 s"):
            client.connect_waiting(sock, path, patience_s=1.5)
        assert 1.4 < time.monotonic() - started < 3


def test_a_per_caller_cap_above_the_total_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[staging]\nmax_connections = 8\nmax_connections_per_caller = 16\n")
    with pytest.raises(ConfigError, match=r"max_connections_per_caller \(16\) is above"):
        load_settings(config)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_out_of_descriptors_the_service_lets_its_queue_wait_and_does_not_spin() -> None:
    with configured("descriptor_reserve = 16") as config:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        child = subprocess.Popen(
            [sys.executable, "-c", OUT_OF_DESCRIPTORS, str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert child.stdin is not None and child.stdout is not None
            assert child.stdout.readline().strip() == "full"
            path = load_settings(config).staging.socket
            with connect(path) as waiting:  # queued: accept(2) fails with EMFILE for now
                waiting.sendall(STATUS)
                before = cpu_seconds(child.pid)
                time.sleep(2)
                assert cpu_seconds(child.pid) - before < 0.2  # no busy loop on accept
                child.stdin.write("go\n")
                child.stdin.flush()
                assert child.stdout.readline().strip() == "released"
                assert answer_of(waiting).get("ok") is True  # served once descriptors free up
        finally:
            child.kill()
            child.wait(timeout=10)

"""A throwaway Prometheus server (Debian's `prometheus` package) scraping given targets:
its own config and data directory, a free loopback port, started and stopped by pid."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.labs.slurmlab import free_port

PROMETHEUS = "/usr/bin/prometheus"
CONFIG = """global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: cm-scale
    static_configs:
      - targets: {targets}
"""


class PrometheusUnavailable(Exception):
    pass


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one sample) an expression evaluates to now."""
        address = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(address, timeout=10) as answer:  # noqa: S310 - loopback
                body = json.loads(answer.read())
        except urllib.error.HTTPError as exc:  # a bad query: Prometheus says why
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise AssertionError(f"{expr}: {body.get('error', body)}")
        data = body["data"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.workdir / "prometheus.log").read_text()[-2000:]
        return ""


@contextlib.contextmanager
def running(targets: Sequence[str], timeout_s: float = 30) -> Iterator[Prometheus]:
    if not Path(PROMETHEUS).exists():
        raise PrometheusUnavailable(f"{PROMETHEUS} not found (install Debian's prometheus)")
    workdir = Path(tempfile.mkdtemp(prefix="cm-prom-"))
    (workdir / "prometheus.yml").write_text(CONFIG.format(targets=json.dumps(list(targets))))
    port = free_port()
    log = (workdir / "prometheus.log").open("ab")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    server = Prometheus(f"http://127.0.0.1:{port}", process, workdir)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise PrometheusUnavailable(f"prometheus exited: {server.log_tail()}")
            ready = f"{server.url}/-/ready"
            with contextlib.suppress(OSError), urllib.request.urlopen(ready, timeout=2):  # noqa: S310
                break
            if time.monotonic() > deadline:
                raise PrometheusUnavailable(f"prometheus not ready: {server.log_tail()}")
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        shutil.rmtree(workdir, ignore_errors=True)

"""Two cloud labs on one fixed network at once break each other (tests/labs/cloudlab.py,
claim_network): the second fails at its start, naming the holder, and leaves the first
lab's bridge alone. A network no other test uses, so this file runs beside any other."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clustermgr.providers.local import net
from tests.conftest import REPO, cannot_run
from tests.labs.cloudlab import CLOUDS, NetworkInUse, claim_network, cloud_lab

NETWORK = "198.18.250.0/24"  # RFC 2544 benchmarking range: no fake hands it out
HOLD = (
    "import sys, time\n"
    "from clustermgr.providers.local import net\n"
    "from tests.labs.cloudlab import claim_network\n"
    "claim = claim_network(net.Subnet.parse(sys.argv[1]))\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_a_second_lab_on_a_claimed_network_fails_at_once_and_leaves_its_bridge(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        cannot_run("needs root (the network's bridge)")
    subnet = net.Subnet.parse(NETWORK)
    kind = dataclasses.replace(CLOUDS["aws"], network=NETWORK)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, NETWORK],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        net.ensure_bridge_for(subnet)  # the holder's lab's bridge
        with pytest.raises(NetworkInUse) as caught, cloud_lab(tmp_path, kind):
            pass
        message = str(caught.value)
        assert f"network {NETWORK}" in message and f"pid {holder.pid}" in message, message
        assert "cloud-networks group" in message, message
        assert Path("/sys/class/net", subnet.bridge).exists()  # not removed by the loser
    finally:
        holder.communicate("", timeout=30)
        net.remove_bridge_for(subnet)
    claim_network(subnet).close()  # the holder gone, its claim went with it

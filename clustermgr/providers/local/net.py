"""The plumbing of the local provider: a bridge, network namespaces, veths, slurmd processes.

Every command is an argv list with a timeout. Names are short (Linux interface names are at
most 15 characters): the bridge is `cmbr-<8 hex of the subnet>`, an instance `lc-<8 hex>`
has the namespace `cm-lc-<8 hex>` and the host-side veth `lc-<8 hex>-h` (its peer is
`eth0` inside the namespace).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from clustermgr.core.errors import ErrorKind, ProviderError
from clustermgr.providers.local.errors import NetError

NETNS_DIR = Path("/var/run/netns")
TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
CMD_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
# slurmctld keeps a resumed node POWERING_UP until it reports a boot later than the resume
# request (whole seconds). A "boot" emulated at the moment of the launch can fall in the same
# second as that request, so the instance boots BOOT_DELAY_S after it is launched (as a VM
# would, only faster), and its boot clock starts then.
BOOT_DELAY_S = 4  # > 1 s of rounding (whole-second clocks) + 1 s of slurmd start + margin
# Constant script (data travels as arguments): wait out the boot, then start the namespace
# with a boot clock that reads ~0 s at that moment.
BOOT_SCRIPT = (
    'sleep "$0"; up=$(cut -d. -f1 /proc/uptime); '
    'exec "$1" --time --boottime "-$up" --fork --kill-child "$2" "--net=$3" "$4" -D -N "$5" '
    '--conf-server "$6"'
)


# With a munge key server: the instance gets its own mount namespace too, where root (this
# script, before slurmd) mounts private tmpfs on /run/munge and /etc/munge, redeems the
# launch's one-time token (read by curl from a root-only file, then removed) for the key,
# starts its own munged as `munge`, then slurmd: the node's Slurm traffic is signed with the
# key it fetched, not with this machine's munged. Arguments after the namespace path:
# slurmd, node, conf server, key URL, key pin, token file.
KEYED_BOOT_SCRIPT = (
    'sleep "$0"; up=$(cut -d. -f1 /proc/uptime); '
    'exec "$1" --mount --propagation private --time --boottime "-$up" --fork --kill-child '
    '"$2" "--net=$3" /bin/sh -c "$4" "$5" "$6" "$7" "$8" "$9" "${10}"'
)
# An image's cloud-config (cloudinit.py): the instance also gets its own mount and UTS
# namespaces (its boot renames its host and writes /etc), and the boot runs the plan's
# steps there (cloudinit_run.py). Arguments after the namespace path: python, the plan.
CLOUD_CONFIG_BOOT_SCRIPT = (
    'sleep "$0"; up=$(cut -d. -f1 /proc/uptime); '
    'exec "$1" --mount --uts --propagation private --time --boottime "-$up" --fork '
    '--kill-child "$2" "--net=$3" "$4" -m clustermgr.providers.local.cloudinit_run "$5"'
)
# the boot's PATH: /usr/local/sbin first, where the instance's systemd stand-ins are
CLOUD_CONFIG_PATH = "/usr/local/sbin:/usr/local/bin:" + TOOL_PATH
NODE_BOOT = """set -eu
mount -t tmpfs -o mode=0755,size=1m clustermgr-munge /run/munge
mount -t tmpfs -o mode=0700,size=1m clustermgr-munge-key /etc/munge
chown munge:munge /run/munge /etc/munge
umask 077
tries=0
until curl -sS --fail --insecure --pinnedpubkey "$4" --connect-timeout 5 --max-time 20 \
        --data-binary "@$5" -o /etc/munge/munge.key "$3"; do
    tries=$((tries + 1))
    if [ "$tries" -ge 90 ]; then rm -f "$5"; echo "no munge key from $3" >&2; exit 1; fi
    sleep 2
done
rm -f "$5"
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
umask 022  # slurmd's configless cache (SLURM_CONF of every job) must stay readable to users
setpriv --reuid=munge --regid=munge --init-groups munged \
    --seed-file=/run/munge/munged.seed --log-file=/run/munge/munged.log
exec "$0" -D -N "$1" --conf-server "$2"
"""
MUNGE_RUN_DIR = Path("/run/munge")


@dataclass(frozen=True)
class KeyBoot:
    """The instance's way to its munge key: the server, its pin, the token's file."""

    url: str
    pin: str
    token_file: Path


def tool(name: str) -> str | None:
    return shutil.which(name, path=TOOL_PATH)


def run(argv: list[str], timeout: float = CMD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise NetError(f"{argv[0]} is not installed", code="ToolMissing") from None
    except subprocess.TimeoutExpired:
        raise NetError(f"{' '.join(argv[:4])} timed out after {timeout:.0f} s") from None


def ip(*args: str, ok_if: tuple[str, ...] = ()) -> str:
    """Run `ip ARGS`; an error whose text contains one of `ok_if` counts as done."""
    done = run([tool("ip") or "ip", *args])
    if done.returncode != 0:
        if any(text in done.stderr for text in ok_if):
            return ""
        raise NetError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


# --- the subnet and its bridge -----------------------------------------------------------


@dataclass(frozen=True)
class Subnet:
    network: ipaddress.IPv4Network

    @classmethod
    def parse(cls, text: str) -> Subnet:
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError as exc:
            raise ProviderError(
                ErrorKind.INVALID, f"subnet {text!r}: {exc}", provider="local", code="BadSubnet"
            ) from None
        if not isinstance(network, ipaddress.IPv4Network) or network.num_addresses < 4:
            raise ProviderError(
                ErrorKind.INVALID,
                f"subnet {text!r}: needs an IPv4 network of at least 4 addresses",
                provider="local",
                code="BadSubnet",
            )
        return cls(network)

    @property
    def bridge(self) -> str:
        return "cmbr-" + hashlib.sha1(str(self.network).encode()).hexdigest()[:8]  # noqa: S324

    @property
    def host_address(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def prefix(self) -> int:
        return self.network.prefixlen

    def instance_addresses(self) -> list[str]:
        """Every address an instance may take: the subnet's hosts after the bridge's."""
        first = self.network.network_address + 2
        last = self.network.broadcast_address - 1
        return [str(ipaddress.IPv4Address(a)) for a in range(int(first), int(last) + 1)]


def addresses_by_device() -> dict[str, list[str]]:
    data = json.loads(ip("-j", "-4", "addr", "show") or "[]")
    return {
        link["ifname"]: [a["local"] for a in link.get("addr_info", []) if "local" in a]
        for link in data
    }


def bridge_state(subnet: Subnet) -> tuple[bool, str]:
    """(usable, detail): the bridge holds the host address, or it can be made."""
    by_device = addresses_by_device()
    for device, addresses in by_device.items():
        if subnet.host_address in addresses and device != subnet.bridge:
            return False, f"{subnet.host_address} is already on {device}, not on {subnet.bridge}"
    if subnet.host_address in by_device.get(subnet.bridge, []):
        return True, f"{subnet.bridge} holds {subnet.host_address}/{subnet.prefix}"
    return True, f"{subnet.bridge} not made yet: the first launch makes it"


def ensure_bridge_for(subnet: Subnet) -> str:
    """Make the bridge (idempotent) with the subnet's first address; return that address."""
    usable, detail = bridge_state(subnet)
    if not usable:
        raise NetError(detail, code="AddressInUse")
    ip("link", "add", subnet.bridge, "type", "bridge", ok_if=("File exists",))
    ip(
        "addr",
        "add",
        f"{subnet.host_address}/{subnet.prefix}",
        "dev",
        subnet.bridge,
        ok_if=("File exists", "Address already assigned"),
    )
    ip("link", "set", subnet.bridge, "up")
    return subnet.host_address


def remove_bridge_for(subnet: Subnet) -> None:
    ip("link", "del", subnet.bridge, ok_if=("Cannot find device", "does not exist"))


# --- one instance: namespace + veth ------------------------------------------------------


def netns_name(instance_id: str) -> str:
    return f"cm-{instance_id}"


def veth_name(instance_id: str) -> str:
    return f"{instance_id}-h"


def create_network(instance_id: str, subnet: Subnet, address: str) -> None:
    """A namespace whose eth0 (address/prefix, MAC from the address) hangs on the bridge;
    undone on failure."""
    ns, veth = netns_name(instance_id), veth_name(instance_id)
    try:
        ip("netns", "add", ns)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", subnet.bridge, "up")
        ip("-n", ns, "link", "set", "eth0", "address", mac_of(address))
        ip("-n", ns, "addr", "add", f"{address}/{subnet.prefix}", "dev", "eth0")
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "route", "add", "default", "via", subnet.host_address)
    except ProviderError:
        delete_network(instance_id)
        raise


def mac_of(address: str) -> str:
    """eth0's MAC, from its address (locally administered: 02:00 + the 4 bytes): an
    instance that gets a released address gets its MAC too, so the neighbours' ARP caches
    stay right (with a new MAC, peers kept sending to the old one for up to a minute)."""
    packed = ipaddress.IPv4Address(address).packed
    return "02:00:" + ":".join(f"{byte:02x}" for byte in packed)


def delete_network(instance_id: str) -> None:
    """Remove the veth and the namespace; already gone is fine."""
    gone = ("Cannot find device", "does not exist", "No such file")
    ip("link", "del", veth_name(instance_id), ok_if=gone)
    ip("netns", "del", netns_name(instance_id), ok_if=gone)


def netns_exists(instance_id: str) -> bool:
    return (NETNS_DIR / netns_name(instance_id)).exists()


def namespaced_instances(prefix: str = "lc-") -> list[str]:
    """Instance ids (`prefix`...) that have a namespace on this machine, whoever made it."""
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return []
    made = netns_name(prefix)
    return sorted(n.removeprefix("cm-") for n in names if n.startswith(made))


def on_bridge(instance_id: str, subnet: Subnet) -> bool:
    """The instance's host-side veth hangs on the subnet's bridge (so it is that subnet's
    provider's instance, not another state dir's)."""
    try:
        master = os.readlink(Path("/sys/class/net") / veth_name(instance_id) / "master")
    except OSError:
        return False
    return os.path.basename(master) == subnet.bridge


# --- processes ---------------------------------------------------------------------------


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), None if gone
    or a zombie (a zombie child of ours is reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return None
    return int(fields[19])


def alive(pid: int, started: int | None) -> bool:
    """The very process we started is still running (a reused pid does not count)."""
    now = start_time(pid)
    return now is not None and now == started


def spawn_slurmd(
    instance_id: str,
    node: str,
    conf_server: str,
    slurmd: str,
    log_path: Path,
    key: KeyBoot | None = None,
) -> tuple[int, int | None]:
    """slurmd -D in the instance's namespace and a fresh boot clock, in its own session,
    detached from the caller (not our child for long: no Popen to reap). With `key`, the
    instance first fetches its munge key and runs its own munged (KEYED_BOOT_SCRIPT).
    (pid, start time)."""
    namespace = [
        str(BOOT_DELAY_S),
        tool("unshare") or "/usr/bin/unshare",
        tool("nsenter") or "/usr/bin/nsenter",
        str(NETNS_DIR / netns_name(instance_id)),
    ]
    if key is None:
        argv = ["/bin/sh", "-c", BOOT_SCRIPT, *namespace, slurmd, node, conf_server]
    else:
        MUNGE_RUN_DIR.mkdir(mode=0o755, exist_ok=True)  # the mount point of the node's own
        argv = [
            "/bin/sh",
            "-c",
            KEYED_BOOT_SCRIPT,
            *namespace,
            NODE_BOOT,
            slurmd,
            node,
            conf_server,
            key.url,
            key.pin,
            str(key.token_file),
        ]
    return _spawn_detached(argv, {"PATH": TOOL_PATH, "CLUSTERMGR_NODE": node}, log_path, node)


def spawn_cloud_config(
    instance_id: str, node: str, python: str, plan_file: Path, log_path: Path
) -> tuple[int, int | None]:
    """The instance's boot from an image's cloud-config: `plan_file` (cloudinit.BootPlan,
    root-only) carried out in its namespaces, detached as spawn_slurmd's is."""
    argv = [
        "/bin/sh",
        "-c",
        CLOUD_CONFIG_BOOT_SCRIPT,
        str(BOOT_DELAY_S),
        tool("unshare") or "/usr/bin/unshare",
        tool("nsenter") or "/usr/bin/nsenter",
        str(NETNS_DIR / netns_name(instance_id)),
        python,
        str(plan_file),
    ]
    env = {"PATH": CLOUD_CONFIG_PATH, "CLUSTERMGR_NODE": node}
    return _spawn_detached(argv, env, log_path, node)


def _spawn_detached(
    argv: list[str], env: dict[str, str], log_path: Path, node: str
) -> tuple[int, int | None]:
    env = {**env, "LANG": "C.UTF-8"}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    except OSError as exc:
        raise NetError(f"cannot start slurmd for {node}: {exc}", code="SpawnFailed") from None
    return pid, start_time(pid)


def namespace_pids(instance_id: str) -> list[int]:
    """Every process whose network namespace is the instance's (slurmd, slurmstepd, jobs),
    and every process on its way in (the boot script, unshare and nsenter name the namespace
    in their arguments until slurmd runs inside it)."""
    path = NETNS_DIR / netns_name(instance_id)
    try:
        info = os.stat(path)
        target: tuple[int, int] | None = (info.st_ino, info.st_dev)
    except OSError:
        target = None
    needle = str(path).encode() + b"\0"  # a whole argument (or its `--net=` tail)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        if target is not None:
            try:
                netns = os.stat(f"/proc/{entry.name}/ns/net")
            except OSError:
                continue
            if (netns.st_ino, netns.st_dev) == target:
                found.append(int(entry.name))
                continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                if needle in handle.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_instances(leaders: dict[str, tuple[int, int | None]]) -> None:
    """Power off instances: SIGTERM to each session leader and every process in each
    namespace, SIGKILL after STOP_TIMEOUT_S to whatever is left. `leaders` maps the
    instance id to (pid, start time) of its unshare process."""

    def remaining() -> list[int]:
        pids = [pid for pid, started in leaders.values() if alive(pid, started)]
        for instance_id in leaders:
            pids += [p for p in namespace_pids(instance_id) if start_time(p) is not None]
        return sorted(set(pids))

    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 2.0)):
        pids = remaining()
        if not pids:
            return
        for pid, started in leaders.values():
            if alive(pid, started):  # its session's group: slurmd before it enters the netns
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)
        _signal(pids, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and remaining():
            time.sleep(0.05)

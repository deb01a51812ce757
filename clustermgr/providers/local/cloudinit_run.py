"""Inside a local instance's namespaces: carry out its cloud-config's plan (cloudinit.py).

Run as root by the instance's boot (net.spawn_cloud_config) as
`python -m clustermgr.providers.local.cloudinit_run PLAN`, already in the instance's network,
mount (private), UTS and time namespaces. PLAN is a root-only JSON file the provider wrote
(the user-data's files hold the launch's munge-key token); it is removed once read. Steps:
the private trees (cloudinit.py's docstring), the systemd stand-ins, write_files, the NFS
stand-ins' bind mounts, then each runcmd entry in order, as cloud-init runs them (a failed
entry is reported and the next one runs). The last entry's systemd-run runs the boot script
in the foreground, so this process lives as long as the node's slurmd.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from clustermgr.core.logsafe import say
from clustermgr.providers.local.cloudinit import PRIVATE_TREES, BootPlan

OVERLAID = tuple(tree for tree in PRIVATE_TREES if tree != "/run")
STAND_IN_DIR = Path("/usr/local/sbin")  # first on the boot's PATH, as on Debian
# systemctl as a local instance knows it: the units a burst node's boot restarts, started
# as their Debian units would start them (in the instance's own /run).
SYSTEMCTL = """#!/bin/sh
# clustermgr local provider: systemd's stand-in in a namespace instance (cloudinit_run.py)
set -eu
stop() { if [ -r "$1" ]; then kill "$(cat "$1")" 2>/dev/null || true; sleep 0.2; fi; }
case "${1:-} ${2:-}" in
"start munge" | "restart munge")
    stop /run/munge/munged.pid
    install -d -o munge -g munge -m 0755 /run/munge
    exec setpriv --reuid=munge --regid=munge --init-groups munged \\
        --seed-file=/run/munge/munged.seed --log-file=/run/munge/munged.log ;;
"start nslcd" | "restart nslcd")
    stop /run/nslcd/nslcd.pid
    install -d -o nslcd -g nslcd -m 0755 /run/nslcd
    nslcd
    tries=0
    until [ -S /run/nslcd/socket ] || [ "$tries" -ge 50 ]; do
        sleep 0.1
        tries=$((tries + 1))
    done ;;
*)
    echo "systemctl on a local instance knows only start|restart munge|nslcd, not: $*" >&2
    exit 1 ;;
esac
"""
# systemd-run: the unit's command in the foreground (it is the boot's last step).
SYSTEMD_RUN = """#!/bin/sh
# clustermgr local provider: systemd's stand-in in a namespace instance (cloudinit_run.py)
set -eu
while [ $# -gt 0 ]; do
    case "$1" in
    --unit=*) shift ;;
    --unit) shift 2 ;;
    -*) echo "systemd-run on a local instance knows only --unit, not $1" >&2; exit 1 ;;
    *) break ;;
    esac
done
exec "$@"
"""


class BootFailed(Exception):
    """A step of the boot failed; the message says which."""


def run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BootFailed(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def private_trees(scratch: Path) -> None:
    """Copy-on-write /etc, /usr/local, /opt (upper layers on a tmpfs at `scratch`) and a
    fresh /run, visible only in this mount namespace."""
    if any(c in str(scratch) for c in ",:"):
        raise BootFailed(f"{scratch}: an overlay's layer path cannot hold ',' or ':'")
    run("mount", "-t", "tmpfs", "-o", "mode=0700,size=256m", "cm-node", str(scratch))
    for index, tree in enumerate(OVERLAID):
        upper, work = scratch / f"{index}.upper", scratch / f"{index}.work"
        upper.mkdir()
        work.mkdir()
        options = f"lowerdir={tree},upperdir={upper},workdir={work}"
        run("mount", "-t", "overlay", "-o", options, "cm-node", tree)
    run("mount", "-t", "tmpfs", "-o", "mode=0755,size=64m", "cm-node-run", "/run")
    Path("/run/systemd/system").mkdir(parents=True)  # where the boot looks for systemd
    for name, text in (("systemctl", SYSTEMCTL), ("systemd-run", SYSTEMD_RUN)):
        STAND_IN_DIR.mkdir(parents=True, exist_ok=True)
        write(STAND_IN_DIR / name, text, 0o755)


def write(path: Path, content: str, mode: int) -> None:
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
    os.chmod(path, mode)


def bind(source: str, target: str, read_only: bool) -> None:
    Path(target).mkdir(mode=0o755, parents=True, exist_ok=True)
    run("mount", "--bind", source, target)
    if read_only:
        run("mount", "-o", "remount,bind,ro", target)


def boot(plan: BootPlan) -> int:
    private_trees(Path(plan.scratch))
    for entry in plan.files:
        write(Path(entry.path), entry.content, entry.mode)
    for mount in plan.binds:
        bind(mount.source, mount.target, mount.read_only)
    status = 0
    for command in plan.runcmd:
        status = subprocess.run(command, check=False).returncode
        if status != 0:
            say(f"cloud-init (local): runcmd {command!r} exited {status}", err=True)
    return status


def main(argv: list[str] | None = None) -> int:
    [plan_file] = sys.argv[1:] if argv is None else argv
    path = Path(plan_file)
    plan = BootPlan.from_json(path.read_text())
    path.unlink()
    try:
        return boot(plan)
    except (BootFailed, OSError) as exc:
        say(f"cloud-init (local): boot failed: {exc}", err=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The munge key onto a cloud director: pushed by clustermgr over ssh, never in user data.

A burst node fetches the munge key from its region's director at boot (the read-only
`clustermgr-keys` rsync module, limited to the region's subnet); the local lab director
copies it from its user data's path on this machine. A cloud director has no such path, so
with `[directors.key_push]` clustermgr puts `munge_key_file` there itself once the director
answers, before its image and LDAP syncs:

    rsync --perms --times --checksum --chmod=F0400 --chown=munge:munge --timeout=60
          -e "ssh -p PORT -i IDENTITY -o BatchMode=yes -o StrictHostKeyChecking=accept-new
              -o UserKnownHostsFile=<state_dir>/directors/NAME/known_hosts-INSTANCE ..."
          KEY USER@ADDRESS:REMOTE_PATH

run from an argv (never a shell). The key travels inside ssh only. The host key is trusted
on first use *per instance*: a new instance gets a new known_hosts file, and a host key that
changes under the same instance is refused. A successful push is recorded in
`<state_dir>/directors/NAME/munge-key.json` (instance id, the key file's size and mtime: no
key material), and the health check keeps the director out of READY until the record matches
its current instance and key file; a rotated key is pushed again at the next sync.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from clustermgr.config import DirectorSettings, KeyPushSettings, Settings
from clustermgr.errors import ClusterMgrError

RECORD = "munge-key.json"
SSH_VERDICTS = ("Host key verification failed", "Permission denied", "ssh:", "Offending")


@dataclass(frozen=True)
class KeyPush:
    """One push: where from, to whom, and the per-instance known_hosts file."""

    key_file: Path
    address: str
    instance_id: str
    settings: KeyPushSettings
    known_hosts: Path

    def destination(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.settings.ssh_user}@{host}:{self.settings.remote_path}"

    def ssh_command(self) -> str:
        """rsync's -e value: rsync splits it on spaces itself (no shell); the settings
        refuse paths with spaces or quotes."""
        parts = [
            "ssh",
            f"-p {self.settings.ssh_port}",
            f"-i {self.settings.identity_file}",
            "-o BatchMode=yes",
            "-o IdentitiesOnly=yes",
            "-o StrictHostKeyChecking=accept-new",
            f"-o UserKnownHostsFile={self.known_hosts}",
            "-o GlobalKnownHostsFile=/dev/null",
            f"-o ConnectTimeout={int(self.settings.connect_timeout_s)}",
        ]
        return " ".join(parts)

    def argv(self) -> list[str]:
        argv = [
            "rsync",
            "--perms",
            "--times",
            "--checksum",
            "--chmod=F0400",
            f"--chown={self.settings.owner}",
            "--timeout=60",
            "-e",
            self.ssh_command(),
        ]
        if self.settings.rsync_path:
            argv.append(f"--rsync-path={self.settings.rsync_path}")
        return [*argv, str(self.key_file), self.destination()]


def director_dir(settings: Settings, name: str) -> Path:
    return settings.daemon.state_dir / "directors" / name


def plan(
    settings: Settings, spec: DirectorSettings, name: str, instance_id: str, address: str
) -> KeyPush | None:
    """The push for this director's instance, or None when it has no key_push."""
    if spec.key_push is None or spec.munge_key_file is None:
        return None
    safe_instance = "".join(c if c.isalnum() or c in "-_." else "_" for c in instance_id)
    known_hosts = director_dir(settings, name) / f"known_hosts-{safe_instance}"
    return KeyPush(spec.munge_key_file, address, instance_id, spec.key_push, known_hosts)


def _stamp(key_file: Path) -> dict[str, int]:
    st = key_file.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def push(push: KeyPush, record_dir: Path, timeout_s: float = 120.0) -> str:
    """Push the key; returns a line for the log. Raises KeyPushError (one line: the
    destination and rsync's or ssh's own message, never key material)."""
    try:
        stamp = _stamp(push.key_file)
    except OSError as exc:
        raise KeyPushError(f"munge_key_file {push.key_file}: {exc.strerror or exc}") from None
    record_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        done = subprocess.run(
            push.argv(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KeyPushError(f"munge key to {push.destination()}: {exc}") from None
    if done.returncode != 0:
        detail = _gist(done.stderr)
        raise KeyPushError(
            f"munge key to {push.destination()}: rsync exited {done.returncode}: {detail}"
        )
    record = {"instance_id": push.instance_id, **stamp}
    path = record_dir / RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
    return f"munge key pushed to {push.destination()} (instance {push.instance_id})"


def _gist(stderr: str) -> str:
    """ssh's and rsync's complaint in one line: the first line, ssh's own verdicts (host
    key, permission, connection) and rsync's last line, without ssh's banner of at-signs."""
    said = [ln.strip(" @\t") for ln in stderr.splitlines()]
    said = [ln for ln in said if ln]
    if not said:
        return "no message"
    verdicts = [ln for ln in said[1:-1] if ln.startswith(SSH_VERDICTS)]
    picked = dict.fromkeys([said[0], *verdicts[:2], said[-1]])
    return " / ".join(picked)


def pushed(record_dir: Path, instance_id: str | None, key_file: Path) -> bool:
    """Whether the current key file was pushed to this instance."""
    try:
        record = json.loads((record_dir / RECORD).read_text())
        stamp = _stamp(key_file)
    except (OSError, ValueError):
        return False
    return bool(
        record.get("instance_id") == instance_id
        and all(record.get(k) == v for k, v in stamp.items())
    )


class KeyPushError(ClusterMgrError):
    """A push that failed: one line naming the destination and what was said."""

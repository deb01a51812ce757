"""Image sync budget: a 1% change to a 1 GB tree sends at most 3% of the tree's bytes, in
at most 1.2x the time of plain `rsync -a` on the same change, both measured in the same run.

A 1 GB software image tree (big shared libraries and many small files) is synced to a
director behind an `rsync --daemon` on a loopback port, with clustermgr's own sync (the
revision check over the manifest, then rsync with its full flags, then verification),
and with plain `rsync -a` to a second copy in the same state. Then, per round, a 1%
change (blocks rewritten inside big files, small files replaced, a new file) is made and
both send it, in alternating order so the page cache favours neither. Prints medians:
bytes sent as a share of the tree, revision check + transfer time against plain rsync's,
and verification time (extra work plain rsync does not do: reported, not in the ratio).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import fail, parser

from clustermgr.config import parse_settings
from clustermgr.db.database import Database
from clustermgr.db.models import Provider
from clustermgr.directors import states
from clustermgr.directors.push_auth import PUSH_USER, push_password
from clustermgr.imaging.replication import ReplicaResult, sync_all
from tests.labs.rsyncd import RsyncDaemon

MB = 1024 * 1024
BYTES_BUDGET = 0.03
TIME_BUDGET = 1.2


def make_tree(root: Path, scale: float) -> int:
    """Half the bytes in 64 big files, half in 2,000 small ones (scaled)."""
    lib, share = root / "usr" / "lib", root / "usr" / "share"
    lib.mkdir(parents=True)
    share.mkdir(parents=True)
    total = 0
    for index in range(64):
        size = int(8 * MB * scale)
        (lib / f"lib{index:02d}.so").write_bytes(os.urandom(size))
        total += size
    for index in range(2000):
        size = int((128 + (index * 37) % 256) * 1024 * scale)
        (share / f"f{index:04d}.dat").write_bytes(os.urandom(size))
        total += size
    (root / "usr" / "bin").mkdir()
    (root / "usr" / "bin" / "tool").symlink_to("../lib/lib00.so")
    os.link(lib / "lib01.so", lib / "lib01.so.1")
    return total


def change_one_percent(root: Path, tree_bytes: int, round_no: int) -> int:
    """Rewrite ~1% of the tree's bytes: blocks in 20 big files, 10 small files, a new
    file. Times are pushed a second on, so a quick check at any precision sees them."""
    target = tree_bytes // 100
    block = target // 2 // 20
    changed: list[Path] = []
    for index in range(20):
        path = root / "usr" / "lib" / f"lib{(index + round_no * 20) % 64:02d}.so"
        with path.open("r+b") as handle:
            handle.seek((round_no * 4096) % max(1, path.stat().st_size - block))
            handle.write(os.urandom(block))
        changed.append(path)
    replaced = 0
    for index in range(10):
        path = root / "usr" / "share" / f"f{(index * 97 + round_no * 13) % 2000:04d}.dat"
        size = path.stat().st_size
        path.write_bytes(os.urandom(size))
        replaced += size
        changed.append(path)
    extra = max(1, target - block * 20 - replaced)
    new = root / "usr" / "share" / f"new-{round_no}.dat"
    new.write_bytes(os.urandom(extra))
    changed.append(new)
    later = time.time() + 2
    for path in changed:
        os.utime(path, (later, later))
    return block * 20 + replaced + extra


def plain_rsync(tree: Path, dest: str, password: str) -> tuple[float, int]:
    """Plain `rsync -a` into the director's push module, as the push user."""
    start = time.perf_counter()
    done = subprocess.run(
        ["rsync", "-a", "--stats", "--no-human-readable", f"{tree}/", dest],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "RSYNC_PASSWORD": password},
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        fail(f"plain rsync exited {done.returncode}: {done.stderr.strip()[-300:]}")
    sent = next(
        int(line.split(":")[1].split()[0])
        for line in done.stdout.splitlines()
        if line.startswith("Total bytes sent:")
    )
    return took, sent


def ours(db: Database, settings_data: dict[str, object]) -> tuple[float, ReplicaResult]:
    """The whole sync call (revision check, transfer, verification) and its replica."""
    start = time.perf_counter()
    report = sync_all(db, parse_settings(settings_data), machine_images=False)
    took = time.perf_counter() - start
    if not report.ok:
        fail(f"sync not verified: {report.replicas} {report.errors}")
    return took, report.replicas[0]


def main() -> None:
    args = parser(__doc__).parse_args()
    scale, rounds = (0.02, 1) if args.quick else (1.0, 5)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tree = tmp / "tree"
        defs = tmp / "defs"
        defs.mkdir()
        (defs / "bench.tmpl").write_text("#cloud-config\n")
        (defs / "bench.toml").write_text(
            f'name = "bench"\ntree = "{tree}"\nuser_data = "bench.tmpl"\n'
        )
        tree_bytes = make_tree(tree, scale)
        db = Database(f"sqlite:///{tmp / 'cm.db'}")
        db.upgrade()
        with db.session() as session:
            session.add(Provider(name="lab", type="local", region="lab", credentials_source="none"))
            session.flush()
            director = states.ensure(session, "lab", "bench", actor="bench")
            director.state = states.DirectorState.READY.value
            director.private_address = "127.0.0.1"
        key = tmp / "munge.key"
        key.write_bytes(os.urandom(128))
        push_secrets = tmp / "images-push.secrets"
        with RsyncDaemon(tmp / "director", push_secrets=push_secrets) as daemon:
            settings_data: dict[str, object] = {
                "daemon": {"state_dir": str(tmp / "state")},
                "slurm": {"munge_key_path": str(key)},
                "images": {
                    "definitions_dir": str(defs),
                    "rsync_port": daemon.port,
                    "rsync_module": daemon.module,
                    "push_secrets": str(push_secrets),
                },
            }
            first_s, first = ours(db, settings_data)
            plain_dest = f"rsync://{PUSH_USER}@127.0.0.1:{daemon.port}/{daemon.module}-push/plain/"
            password = push_password(key).reveal()
            plain_rsync(tree, plain_dest, password)
            print(
                f"tree: {tree_bytes / MB:.0f} MiB; first sync {first_s:.1f} s "
                f"(sent {first.bytes_sent / MB:.0f} MiB, verified in {first.verify_seconds:.1f} s)"
            )
            share, our_s, plain_s, verify_s, transfer_s = [], [], [], [], []
            for round_no in range(rounds):
                changed = change_one_percent(tree, tree_bytes, round_no)
                if round_no % 2:
                    plain = plain_rsync(tree, plain_dest, password)
                    took, replica = ours(db, settings_data)
                else:
                    took, replica = ours(db, settings_data)
                    plain = plain_rsync(tree, plain_dest, password)
                share.append(replica.bytes_sent / tree_bytes)
                our_s.append(took - replica.verify_seconds)
                transfer_s.append(replica.sync_seconds)
                verify_s.append(replica.verify_seconds)
                plain_s.append(plain[0])
                print(
                    f"round {round_no + 1}: changed {changed / tree_bytes:.2%}; ours sent "
                    f"{replica.bytes_sent / tree_bytes:.2%} ({replica.files_sent} files), "
                    f"plain rsync sent {plain[1] / tree_bytes:.2%}"
                )
        db.dispose()
    med = statistics.median
    ratio = med(our_s) / med(plain_s)
    print(f"bytes sent, median of {rounds}: {med(share):.2%} of the tree  budget <= 3%")
    print(
        f"sync (revision check + rsync), median: {med(our_s):.2f} s "
        f"(rsync itself {med(transfer_s):.2f} s); plain rsync -a: {med(plain_s):.2f} s"
    )
    print(f"ratio {ratio:.2f}  budget <= {TIME_BUDGET}")
    print(f"rsync step alone against plain rsync: ratio {med(transfer_s) / med(plain_s):.2f}")
    print(f"verification (checksum dry run over the daemon), median: {med(verify_s):.2f} s")


if __name__ == "__main__":
    main()
